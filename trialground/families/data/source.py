"""data: generated data-analysis tasks — a CSV in the workspace and a question its data answers.

The agent must compute the answer (the table is too long to do by eye) and end the reply
with a line `Answer: <value>`. Numeric answers use the `numeric` verifier
(`params={"answer": float, "rel_tol": 0.0, "abs_tol": ...}`; abs_tol 0.011 for 2-decimal answers, so
either rounding direction passes, 0 for counts); names use `exact` (`params={"answer": str}`). The
reference is the gold answer text;
`metadata["reference_program"]` is a standard-library Python program that prints it from the CSV (the
tests run it to prove the gold answer is what the question asks).

Deterministic in (seed, n, split); a task's split is a hash of its content (20% eval), so train and eval
never share a task. Tables are built so that arg-max/arg-min answers are unique.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trialground.tasks.model import Split, Task, VerifierSpec, split_of
from trialground.tasks.sources import SourceRequest


@dataclass(frozen=True)
class Schema:
    file: str
    what: str
    cats: dict[str, tuple[str, ...]]
    nums: dict[str, tuple[float, float, int]]  # column -> (low, high, decimals)


SCHEMAS = (
    Schema(
        "sales.csv",
        "orders of a shop",
        {
            "region": ("north", "south", "east", "west", "central"),
            "product": ("widget", "gadget", "gizmo", "sprocket", "doohickey", "flange"),
        },
        {"units": (1, 50, 0), "unit_price": (1.0, 120.0, 2)},
    ),
    Schema(
        "weather.csv",
        "daily readings of weather stations",
        {
            "station": ("aberdeen", "bergen", "cork", "dover", "esbjerg"),
            "sky": ("clear", "cloudy", "rain", "fog"),
        },
        {"temp_c": (-8.0, 31.0, 1), "wind_kmh": (0, 90, 0), "rain_mm": (0.0, 40.0, 1)},
    ),
    Schema(
        "staff.csv",
        "employees of a company",
        {
            "department": ("sales", "support", "research", "finance", "legal", "ops"),
            "office": ("paris", "lagos", "osaka", "lima"),
        },
        {"age": (21, 64, 0), "salary": (28000, 160000, 0), "years": (0, 35, 0)},
    ),
)

_LOAD = "import csv, statistics\nrows = list(csv.DictReader(open({file!r}, newline='')))\n"


@dataclass(frozen=True)
class Question:
    text: str
    answer: float | str
    program: str  # body after _LOAD; prints the answer


def _num(row: dict[str, str], col: str) -> float:
    return float(row[col])


def _templates() -> list[Callable[[np.random.Generator, Schema, list[dict[str, str]]], Question | None]]:
    return [
        _mean_filtered,
        _sum_two_filters,
        _argmax_total,
        _argmin_mean,
        _count_distinct,
        _count_rows,
        _median_filtered,
        _range_filtered,
    ]


def _pick(rng: np.random.Generator, options: tuple[str, ...] | list[str]) -> str:
    return str(options[int(rng.integers(len(options)))])


def _mean_filtered(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cat = _pick(rng, list(s.cats))
    val, num = _pick(rng, s.cats[cat]), _pick(rng, list(s.nums))
    vals = [_num(r, num) for r in rows if r[cat] == val]
    if not vals:
        return None
    prog = f"v = [float(r[{num!r}]) for r in rows if r[{cat!r}] == {val!r}]\n"
    prog += "print(round(sum(v) / len(v), 2))\n"
    text = f"What is the average {num} over the rows whose {cat} is {val!r}? Round to 2 decimal places."
    return Question(text, round(sum(vals) / len(vals), 2), prog)


def _sum_two_filters(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cat, num = _pick(rng, list(s.cats)), _pick(rng, list(s.nums))
    other = _pick(rng, [c for c in s.nums if c != num] or [num])
    val = _pick(rng, s.cats[cat])
    threshold = float(np.median([_num(r, other) for r in rows]))
    vals = [_num(r, num) for r in rows if r[cat] == val and _num(r, other) > threshold]
    prog = (
        f"v = [float(r[{num!r}]) for r in rows\n"
        f"     if r[{cat!r}] == {val!r} and float(r[{other!r}]) > {threshold!r}]\n"
        "print(round(sum(v), 2))\n"
    )
    text = (
        f"What is the total {num} over the rows whose {cat} is {val!r} and whose {other} is greater than "
        f"{threshold:g}? Round to 2 decimal places."
    )
    return Question(text, round(sum(vals), 2), prog)


def _group_stats(s: Schema, rows: list[dict[str, str]], cat: str, num: str) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r[cat], []).append(_num(r, num))
    return groups


def _unique_extreme(scores: dict[str, float], best: Callable[..., str]) -> str | None:
    winner = best(scores, key=scores.__getitem__)
    rest = [v for k, v in scores.items() if k != winner]
    # A near-tie would make the answer hinge on float noise or on rounding; skip such draws.
    return winner if all(abs(scores[winner] - v) > 1e-6 * max(1.0, abs(v)) for v in rest) else None


def _argmax_total(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cat, num = _pick(rng, list(s.cats)), _pick(rng, list(s.nums))
    totals = {k: sum(v) for k, v in _group_stats(s, rows, cat, num).items()}
    winner = _unique_extreme(totals, max)
    prog = (
        f"t = {{}}\nfor r in rows:\n    t[r[{cat!r}]] = t.get(r[{cat!r}], 0.0) + float(r[{num!r}])\n"
        "print(max(t, key=t.get))\n"
    )
    text = f"Which {cat} has the largest total {num}? Answer with the {cat} name as it appears in the file."
    return None if winner is None else Question(text, winner, prog)


def _argmin_mean(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cat, num = _pick(rng, list(s.cats)), _pick(rng, list(s.nums))
    means = {k: sum(v) / len(v) for k, v in _group_stats(s, rows, cat, num).items()}
    winner = _unique_extreme(means, min)
    prog = (
        f"g = {{}}\nfor r in rows:\n    g.setdefault(r[{cat!r}], []).append(float(r[{num!r}]))\n"
        "print(min(g, key=lambda k: sum(g[k]) / len(g[k])))\n"
    )
    text = f"Which {cat} has the lowest average {num}? Answer with the {cat} name as it appears in the file."
    return None if winner is None else Question(text, winner, prog)


def _count_distinct(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cats = list(s.cats)
    cat, num = _pick(rng, cats), _pick(rng, list(s.nums))
    values = sorted(_num(r, num) for r in rows)
    threshold = values[int(len(values) * 0.9)]
    count = len({r[cat] for r in rows if _num(r, num) >= threshold})
    prog = f"print(len({{r[{cat!r}] for r in rows if float(r[{num!r}]) >= {threshold!r}}}))\n"
    text = f"How many distinct values of {cat} appear among the rows whose {num} is at least {threshold:g}?"
    return Question(text, float(count), prog)


def _count_rows(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    (c1, vals1), (c2, vals2) = list(s.cats.items())[:2]
    v1, v2 = _pick(rng, vals1), _pick(rng, vals2)
    count = sum(1 for r in rows if r[c1] == v1 and r[c2] == v2)
    prog = f"print(sum(1 for r in rows if r[{c1!r}] == {v1!r} and r[{c2!r}] == {v2!r}))\n"
    return Question(f"How many rows have {c1} {v1!r} and {c2} {v2!r}?", float(count), prog)


def _median_filtered(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cat = _pick(rng, list(s.cats))
    val, num = _pick(rng, s.cats[cat]), _pick(rng, list(s.nums))
    vals = [_num(r, num) for r in rows if r[cat] == val]
    if not vals:
        return None
    prog = f"print(round(statistics.median(float(r[{num!r}]) for r in rows if r[{cat!r}] == {val!r}), 2))\n"
    text = f"What is the median {num} over the rows whose {cat} is {val!r}? Round to 2 decimal places."
    return Question(text, round(statistics.median(vals), 2), prog)


def _range_filtered(rng: np.random.Generator, s: Schema, rows: list[dict[str, str]]) -> Question | None:
    cat = _pick(rng, list(s.cats))
    val, num = _pick(rng, s.cats[cat]), _pick(rng, list(s.nums))
    vals = [_num(r, num) for r in rows if r[cat] == val]
    if not vals:
        return None
    prog = (
        f"v = [float(r[{num!r}]) for r in rows if r[{cat!r}] == {val!r}]\nprint(round(max(v) - min(v), 2))\n"
    )
    text = (
        f"What is the difference between the largest and smallest {num} among rows whose {cat} is "
        f"{val!r}? Round to 2 decimal places."
    )
    return Question(text, round(max(vals) - min(vals), 2), prog)


def _table(rng: np.random.Generator, s: Schema) -> tuple[str, list[dict[str, str]]]:
    n_rows = int(rng.integers(40, 160))
    header = ["id", *s.cats, *s.nums]
    rows: list[dict[str, str]] = []
    for i in range(n_rows):
        row = {"id": str(1000 + i)}
        for col, options in s.cats.items():
            row[col] = _pick(rng, options)
        for col, (lo, hi, dec) in s.nums.items():
            x = float(rng.uniform(lo, hi))
            row[col] = str(round(x)) if dec == 0 else f"{x:.{dec}f}"
        rows.append(row)
    lines = [",".join(header)] + [",".join(r[c] for c in header) for r in rows]
    return "\n".join(lines) + "\n", rows


def _draw(rng: np.random.Generator) -> Task | None:
    schema = SCHEMAS[int(rng.integers(len(SCHEMAS)))]
    csv_text, rows = _table(rng, schema)
    templates = _templates()
    q = templates[int(rng.integers(len(templates)))](rng, schema, rows)
    if q is None:
        return None
    if isinstance(q.answer, str):
        verifier = VerifierSpec(kind="exact", params={"answer": q.answer})
        reference = q.answer
    else:
        counted = q.answer == int(q.answer) and "How many" in q.text
        tol = 0.0 if counted else 0.011  # answers are rounded to 0.01; either rounding direction passes
        verifier = VerifierSpec(kind="numeric", params={"answer": q.answer, "rel_tol": 0.0, "abs_tol": tol})
        reference = str(int(q.answer)) if counted else f"{q.answer:.2f}"
    prompt = (
        f"The file {schema.file} in your workspace holds {schema.what} ({len(rows)} rows; header: "
        f"{csv_text.split(chr(10), 1)[0]}). "
        f"{q.text}\nCompute it from the file (write and run code), then end your reply with one line "
        "`Answer: <value>`."
    )
    return Task(
        domain="data",
        prompt=prompt,
        files={schema.file: csv_text},
        reference=reference,
        verifier=verifier,
        metadata={"source": "data", "reference_program": _LOAD.format(file=schema.file) + q.program},
    )


def _split_of(task: Task) -> Split:
    return split_of(task.id, namespace="data:")


def data_tasks(*, n: int, seed: int, split: Split) -> list[Task]:
    """`n` distinct data-analysis tasks of `split`, deterministic in (seed, n, split)."""
    rng = np.random.default_rng([seed, 0xDA7A])
    tasks: list[Task] = []
    seen: set[str] = set()
    while len(tasks) < n:
        task = _draw(rng)
        if task is None or task.id in seen or _split_of(task) != split:
            continue
        seen.add(task.id)
        tasks.append(task.model_copy(update={"split": split}))
    return tasks


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return data_tasks(n=request.n, seed=request.seed, split=request.split)
