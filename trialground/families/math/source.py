"""math / math:FILE: competition-style problems with gold answers, verified by `math-verify`.

File format: JSONL, one object per line::

    {"problem": "What is $2^{10}$?", "answer": "1024"}          # required: problem, answer (LaTeX or plain)
    {"problem": "...", "answer": "\\frac{1}{2}", "split": "eval", "level": 3}

`split` is optional ("train" by default). Any other key must be a scalar and is kept in the task's
metadata (e.g. level, subject, source); nothing is dropped. Errors name the file, line and field.

Each task: domain `math`, verifier `math` with `params={"answer": gold}`, reference `\\boxed{gold}`
(the form the prompt asks for). The bundled set is `assets/basic.jsonl` in this folder.
"""

from __future__ import annotations

from pathlib import Path

from trialground.errors import TaskError
from trialground.tasks.io import jsonl_rows
from trialground.tasks.math_rows import math_task
from trialground.tasks.model import Task
from trialground.tasks.sources import SourceRequest

_SCALARS = (str, int, float, bool, type(None))


def bundled_math_path() -> str:
    return str(Path(__file__).resolve().parent / "assets" / "basic.jsonl")


def math_tasks(path: str | Path) -> list[Task]:
    """Every problem of a math JSONL file, in file order."""
    path = Path(path)
    tasks = []
    for where, lineno, row in jsonl_rows(path):
        if not isinstance(row, dict):
            raise TaskError(f"{where}: expected an object with problem and answer", kind="invalid_task")
        for field in ("problem", "answer"):
            value = row.pop(field, None)
            if isinstance(value, int | float) and not isinstance(value, bool) and field == "answer":
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                raise TaskError(f"{where}: {field}: required, a non-empty string", kind="invalid_task")
            row[f"_{field}"] = value
        split = row.pop("split", "train")
        if split not in ("train", "eval"):
            raise TaskError(f"{where}: split: must be 'train' or 'eval', got {split!r}", kind="invalid_task")
        problem, answer = row.pop("_problem"), row.pop("_answer")
        for key, value in row.items():
            if not isinstance(value, _SCALARS):
                raise TaskError(
                    f"{where}: {key}: extra fields must be scalars (kept as metadata)", kind="invalid_task"
                )
        tasks.append(math_task(problem, answer, split=split, metadata={**row, "line": lineno}))
    if not tasks:
        raise TaskError(f"{path}: no problems", kind="empty")
    return tasks


def load(request: SourceRequest) -> list[Task]:
    return math_tasks(request.arg or bundled_math_path())
