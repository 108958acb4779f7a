"""reasoning_gym:<dataset>[?option=value&...]: questions generated offline by reasoning-gym, scored by exact
match.

Options after `?` are the dataset's own configuration fields (reasoning-gym's `<Dataset>Config`), e.g.
`reasoning_gym:chain_sum?max_terms=2&max_digits=1` for sums of two one-digit numbers; values are read as
integers, floats, `true`/`false`, or else strings. An unknown field or a value the dataset's validation
refuses is a `TaskError` naming it, raised when the config is checked.

reasoning-gym's own `score_answer` pays partial credit (e.g. for a gold answer found as a substring of a
long reply), which a policy learns to exploit; here the gold answer goes to the `exact` verifier
(`params={"answer": gold}`) and the prompt asks for a final `Answer: ...` line
(trialground.verify.kinds.answers extracts a last `\\boxed{}`, else the last `Answer:` line, else the
whole reply). The reference is the gold text.

Datasets whose questions admit many correct answers (any valid countdown expression, any n-queens
placement, ...) cannot be scored by one gold string and are refused with a `TaskError`.

Determinism and splits: entries are read from one reasoning-gym dataset built with a seed derived from
(dataset, seed); an entry's split is a hash of its question (20% eval), so train and eval never share a
question. A repeated question is skipped (it would be a duplicate task); when fewer than `n` distinct
questions of the split turn up in the scanned range, `TaskError` is raised rather than returning fewer.
"""

from __future__ import annotations

import difflib
import hashlib

from trialground.errors import TaskError
from trialground.tasks.model import Split, Task, VerifierSpec, split_of
from trialground.tasks.sources import SourceRequest

_SCAN_FACTOR = 20  # entries scanned per task asked for, before giving up

# Many valid answers per question: an exact gold string would mark correct answers wrong.
MULTI_ANSWER = frozenset(
    [
        "countdown",
        "puzzle24",
        "n_queens",
        "sokoban",
        "word_ladder",
        "palindrome_generation",
        "graph_color",
        "jugs",
        "rush_hour",
        "knight_swap",
        "boxnet",
        "rubiks_cube",
        "tsumego",
        "simple_integration",
        "intermediate_integration",
        "string_synthesis",
        "arc_agi",
        "rearc",
        "composite",
        "codeio",
        "sentence_reordering",
        "kakurasu",
        "survo",
        "futoshiki",
        "mahjong_puzzle",
    ]
)

INSTRUCTION = (
    "\n\nEnd your reply with one line of the form `Answer: <your final answer>`, "
    "the answer exactly as asked above."
)


Option = int | float | bool | str


def parse_spec(spec: str) -> tuple[str, dict[str, Option]]:
    """The dataset name and its configuration options from `dataset[?key=value&...]`."""
    dataset, _, query = spec.partition("?")
    options: dict[str, Option] = {}
    for part in query.split("&") if query else []:
        key, eq, text = part.partition("=")
        if not eq or not key.isidentifier() or not text:
            raise TaskError(
                f"reasoning_gym:{spec}: option {part!r} is not key=value (e.g. ?max_terms=2&max_digits=1)",
                kind="bad_spec",
            )
        if key in options or key in ("seed", "size"):
            raise TaskError(f"reasoning_gym:{spec}: option {key!r} repeated or reserved", kind="bad_spec")
        options[key] = _value(text)
    return dataset, options


def _value(text: str) -> Option:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _split_of(question: str) -> Split:
    return split_of(question)


def check_dataset(spec: str) -> None:
    """`TaskError` unless `spec` names a single-answer reasoning-gym dataset (reasoning-gym installed) and
    options its configuration accepts."""
    where = f"reasoning_gym:{spec}"
    dataset, options = parse_spec(spec)
    if dataset in MULTI_ANSWER:
        raise TaskError(
            f"{where}: this dataset's questions have many correct answers; exact scoring would reject "
            "valid ones (pick a single-answer dataset such as chain_sum, gcd, leg_counting)",
            kind="bad_spec",
        )
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError as e:
        raise TaskError(
            f"{where}: the `reasoning-gym` package is not installed: "
            "pip install 'trialground[reasoning-gym]'",
            kind="missing",
        ) from e
    if dataset not in DATASETS:
        close = difflib.get_close_matches(dataset, [d for d in DATASETS if d not in MULTI_ANSWER], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise TaskError(f"{where}: reasoning-gym has no dataset {dataset!r}{hint}", kind="bad_spec")
    if options:
        import reasoning_gym

        try:
            reasoning_gym.create_dataset(dataset, size=1, seed=0, **options)
        except (TypeError, ValueError, AssertionError) as e:  # an unknown field, a refused value
            raise TaskError(
                f"{where}: the dataset's configuration refuses the options: {e}", kind="bad_spec"
            ) from e


def reasoning_gym_tasks(spec: str, *, n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split` from the named reasoning-gym dataset (`dataset[?options]`), deterministic in
    (spec, seed)."""
    where = f"reasoning_gym:{spec}"
    check_dataset(spec)
    dataset, options = parse_spec(spec)
    import reasoning_gym

    size = n * _SCAN_FACTOR
    # reasoning-gym seeds entry i with (seed + i): nearby seeds would give shifted copies of one stream.
    rg_seed = int.from_bytes(hashlib.sha256(f"{spec}:{seed}".encode()).digest()[:4], "big") >> 1
    try:
        data = reasoning_gym.create_dataset(dataset, size=size, seed=rg_seed, **options)
    except Exception as e:  # an unknown name or a dataset needing extra config
        raise TaskError(f"{where}: cannot create the dataset: {e}", kind="bad_spec") from e
    tasks: list[Task] = []
    seen: set[str] = set()
    for index in range(size):
        entry = data[index]
        question, answer = str(entry["question"]), entry["answer"]
        if answer is None or not str(answer).strip():
            raise TaskError(f"{where}: entry {index} has no gold answer", kind="invalid_task")
        if question in seen or _split_of(question) != split:
            continue
        seen.add(question)
        tasks.append(
            Task(
                domain="reasoning",
                prompt=question + INSTRUCTION,
                reference=str(answer),
                verifier=VerifierSpec(kind="exact", params={"answer": str(answer)}),
                split=split,
                metadata={"source": where, "index": index, "seed": seed},
            )
        )
        if len(tasks) == n:
            return tasks
    raise TaskError(
        f"{where}: only {len(tasks)} distinct {split} questions in {size} entries (asked for {n})",
        kind="generator",
    )


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return reasoning_gym_tasks(request.arg, n=request.n, seed=request.seed, split=request.split)
