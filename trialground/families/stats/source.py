"""The `stats` family: one statistic of a data file, computed by a Python script and checked by tolerance.

`data.csv` (random per task) has one of three designs: two groups of measurements (`group,value`), paired
measurements (`x,y`) or two categorical columns with a row id (`id,region,outcome`). Seven statistics,
each defined exactly in the prompt: Welch's t statistic and Cohen's d (pooled standard deviation) for one
group against the other, the Mann-Whitney U of one group (ties count one half), Pearson's r, the
least-squares slope of y on x, Spearman's rho (average ranks for ties), and the chi-square statistic of
independence (no continuity correction). The agent writes `analysis.py`, run as `python3 analysis.py
data.csv`, printing the number.

The hidden check (`check_stats.py`) runs a copy of the script in a directory of its own on a copy of the
workspace's file and on a hidden one of the same design, and the last line it prints must be within a
relative 1e-6 of the value the generator computed in pure Python (the reference uses numpy): a script that
prints the visible answer fails on the hidden file.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "analysis.py"
_CHECK = check_source(Path(__file__).parent, "check_stats.py")
GROUPS = (("control", "treatment"), ("placebo", "drug"), ("old", "new"), ("before", "after"), ("a", "b"))
REGIONS = ("north", "south", "east", "west", "central")
OUTCOMES = ("yes", "no", "maybe")
Data = list[tuple[str, float]] | list[tuple[float, float]] | list[tuple[str, str]]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def var(xs: list[float]) -> float:
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = mean(xs), mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return sxy / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))


def welch(a: list[float], b: list[float]) -> float:
    return (mean(a) - mean(b)) / math.sqrt(var(a) / len(a) + var(b) / len(b))


def cohen(a: list[float], b: list[float]) -> float:
    pooled = ((len(a) - 1) * var(a) + (len(b) - 1) * var(b)) / (len(a) + len(b) - 2)
    return (mean(a) - mean(b)) / math.sqrt(pooled)


def mann_whitney(a: list[float], b: list[float]) -> float:
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = mean(xs), mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def chi_square(rows: list[tuple[str, str]]) -> float:
    cells, left, right, n = Counter(rows), Counter(r for r, _ in rows), Counter(c for _, c in rows), len(rows)
    return sum(
        (cells[(r, c)] - left[r] * right[c] / n) ** 2 / (left[r] * right[c] / n) for r in left for c in right
    )


@dataclass(frozen=True)
class Question:
    key: str
    design: str  # groups, pairs or table
    text: str
    reference: str  # the body of analysis.py after reading the file
    answer: Callable[[list[list[str]]], float]


def question(rng: random.Random) -> tuple[Question, tuple[str, str]]:
    kind = rng.randrange(7)
    first, second = rng.choice(GROUPS)
    names = (first, second)
    split = "a = np.array([v for g, v in rows if g == FIRST])\n"
    split += "b = np.array([v for g, v in rows if g == SECOND])\n"
    read_groups = (
        "rows = [(r['group'], float(r['value'])) for r in csv.DictReader(open(sys.argv[1]))]\n" + split
    )
    read_pairs = "rows = [(float(r['x']), float(r['y'])) for r in csv.DictReader(open(sys.argv[1]))]\n"
    read_pairs += "x = np.array([p[0] for p in rows])\ny = np.array([p[1] for p in rows])\n"

    def groups(f: Callable[[list[float], list[float]], float]) -> Callable[[list[list[str]]], float]:
        return lambda rows: f(
            [float(v) for g, v in rows if g == first], [float(v) for g, v in rows if g == second]
        )

    def pairs(f: Callable[[list[float], list[float]], float]) -> Callable[[list[list[str]]], float]:
        return lambda rows: f([float(x) for x, _ in rows], [float(y) for _, y in rows])

    defs: list[Question] = [
        Question(f"welch:{first}", "groups",
                 f"Welch's t statistic of group `{first}` against group `{second}`: (mean {first} - mean "
                 f"{second}) / sqrt(s1^2/n1 + s2^2/n2), sample variances with n - 1",
                 read_groups + "print((a.mean() - b.mean())\n"
                 "      / np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))\n", groups(welch)),
        Question(f"cohen:{first}", "groups",
                 f"Cohen's d of group `{first}` against group `{second}`: (mean {first} - mean {second}) "
                 "divided by the pooled standard deviation sqrt(((n1-1) s1^2 + (n2-1) s2^2) / (n1 + n2 - 2))",
                 read_groups + "n1, n2 = len(a), len(b)\n"
                 "sp = np.sqrt(((n1 - 1) * np.var(a, ddof=1) + (n2 - 1) * np.var(b, ddof=1))\n"
                 "             / (n1 + n2 - 2))\n"
                 "print((np.mean(a) - np.mean(b)) / sp)\n", groups(cohen)),
        Question(f"mannwhitney:{first}", "groups",
                 f"the Mann-Whitney U statistic of group `{first}` against group `{second}`: over all pairs "
                 f"of one {first} value and one {second} value, 1 when the {first} value is larger, 1/2 when "
                 "they are equal, 0 otherwise, summed",
                 read_groups + "print((a[:, None] > b[None, :]).sum()\n"
                 "      + 0.5 * (a[:, None] == b[None, :]).sum())\n",
                 groups(mann_whitney)),
        Question("pearson", "pairs", "Pearson's correlation coefficient r between x and y",
                 read_pairs + "print(np.corrcoef(x, y)[0, 1])\n", pairs(pearson)),
        Question("slope", "pairs", "the slope of the ordinary least-squares line of y on x (y = a + b x)",
                 read_pairs + "print(np.polyfit(x, y, 1)[0])\n", pairs(slope)),
        Question("spearman", "pairs",
                 "Spearman's rank correlation rho between x and y: Pearson's r of the ranks, tied values "
                 "getting the average of their ranks",
                 read_pairs + RANKS + "print(np.corrcoef(rank(x), rank(y))[0, 1])\n",
                 pairs(lambda xs, ys: pearson(ranks(xs), ranks(ys)))),
        Question("chisquare", "table",
                 "the chi-square statistic of independence between region and outcome: the sum over the "
                 "contingency table's cells of (observed - expected)^2 / expected, expected = row total * "
                 "column total / n, no continuity correction",
                 "rows = [(r['region'], r['outcome']) for r in csv.DictReader(open(sys.argv[1]))]\n"
                 "regions, outcomes = sorted({r for r, _ in rows}), sorted({o for _, o in rows})\n"
                 "table = [[sum(1 for p in rows if p == (r, o)) for o in outcomes] for r in regions]\n"
                 "t = np.array(table, dtype=float)\nexpected = np.outer(t.sum(1), t.sum(0)) / t.sum()\n"
                 "print(((t - expected) ** 2 / expected).sum())\n",
                 lambda rows: chi_square([(r, o) for _, r, o in rows])),
    ]  # fmt: skip
    q = defs[kind]
    return q, names


def data(design: str, names: tuple[str, str], rng: random.Random) -> list[list[str]]:
    if design == "groups":
        rows = []
        for name, shift in zip(names, (rng.uniform(-3, 3), 0.0), strict=True):
            base, spread = rng.uniform(20, 80), rng.uniform(2, 12)
            rows += [[name, f"{rng.gauss(base + shift, spread):.1f}"] for _ in range(rng.randint(12, 40))]
        rng.shuffle(rows)
        return rows
    if design == "pairs":
        b, noise = rng.uniform(-3, 3), rng.uniform(0.5, 8)
        xs = [round(rng.uniform(0, 50), 1) for _ in range(rng.randint(20, 60))]
        return [[f"{x:.1f}", f"{b * x + rng.gauss(0, noise * 5):.1f}"] for x in xs]
    regions, weights = rng.sample(REGIONS, k=rng.randint(2, 4)), [rng.uniform(0.5, 2) for _ in OUTCOMES]
    rows = []
    for region in regions:
        tilt = [w * rng.uniform(0.6, 1.4) for w in weights]
        rows += [[region, rng.choices(OUTCOMES, tilt)[0]] for _ in range(rng.randint(15, 50))]
    rng.shuffle(rows)
    ids = rng.sample(range(10000, 99999), k=len(rows))
    return [[str(i), *row] for i, row in zip(ids, rows, strict=True)]


RANKS = (
    "def rank(v):\n    _, inv, counts = np.unique(v, return_inverse=True, return_counts=True)\n"
    "    return (np.cumsum(counts) - (counts - 1) / 2)[inv]\n"
)
HEADERS = {"groups": "group,value", "pairs": "x,y", "table": "id,region,outcome"}


def csv_text(design: str, rows: list[list[str]]) -> str:
    return HEADERS[design] + "\n" + "".join(",".join(r) + "\n" for r in rows)


def make_task(q: Question, names: tuple[str, str], data_seed: int, split: Split) -> Task:
    rows, hidden = (
        data(q.design, names, random.Random(data_seed)),
        data(q.design, names, random.Random(data_seed ^ 0x5EED)),
    )
    spec = {"solution": SOLUTION, "data": csv_text(q.design, rows), "want": q.answer(rows),
            "hidden_data": csv_text(q.design, hidden), "hidden_want": q.answer(hidden),
            "timeout_s": 60}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    prompt = (
        f"data.csv in your workspace has the columns {HEADERS[q.design]}. Write a Python script {SOLUTION} "
        f"that, run as `python3 {SOLUTION} data.csv`, prints {q.text}, as a number on its last line of "
        "output (checked to a relative 1e-6; numpy and scipy are available). It is also run on another file "
        "of the same design, so compute the value, do not write it down."
    )
    head = "import csv\nimport sys\n\nimport numpy as np\n\n"
    head += f"FIRST, SECOND = {names[0]!r}, {names[1]!r}\n"
    return Task(
        domain="stats",
        prompt=prompt,
        files={"data.csv": csv_text(q.design, rows), SOLUTION: "# usage: python3 analysis.py data.csv\n"},
        hidden_checks={"check_stats.py": check},
        reference=head + q.reference,
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 150}
        ),
        split=split,
        metadata={"family": "stats", "template": q.key.split(":")[0], "key": q.key},
    )


def stats_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its question and its data."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        q, names = question(rng)
        data_seed = rng.getrandbits(48)
        return f"{q.key}:{names[1]}|{data_seed}", lambda: make_task(q, names, data_seed, split)

    return draw_tasks("stats", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return stats_tasks(request.n, request.seed, request.split)
