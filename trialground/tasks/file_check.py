"""Every problem of a task file or task directory at once, each with its place (`FILE:LINE: FIELD: ...`).

`read_tasks` stops at the first broken task, as loading must; a check before a run (`config validate`,
`train`'s preflight) lists them all, so one edit fixes a file instead of one edit per run.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from trialground.errors import TaskError
from trialground.tasks.io import BLANK, TASK_YAML, parse_line, read_raw, read_task_dir
from trialground.tasks.model import Task


def task_file_problems(path: str | Path) -> list[str]:
    """Each problem of the `.jsonl` file or task directory (or collection) at `path`; none when it loads."""
    p = Path(path)
    if p.is_dir():
        return _dir_problems(p)
    try:
        name, raw = read_raw(p)
    except TaskError as exc:
        return [str(exc)]
    out: list[str] = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        where = f"{name}:{lineno}"
        try:
            data = parse_line(line, where)
        except TaskError as exc:
            out.append(str(exc))
            continue
        if data is not BLANK:
            out += _task_problems(data, where)
    return out


def _task_problems(data: object, where: str) -> list[str]:
    if not isinstance(data, dict):
        return [f"{where}: expected a JSON object with the task fields, got {type(data).__name__}"]
    try:
        task = Task.model_validate(data)
    except ValidationError as e:
        return [f"{where}: {'.'.join(map(str, err['loc'])) or '(task)'}: {err['msg']}" for err in e.errors()]
    if data.get("id") and task.id != task.content_hash():
        return [f"{where}: id: {task.id!r} does not match the content hash (remove the id to recompute it)"]
    return []


def _dir_problems(root: Path) -> list[str]:
    subdirs = (
        [root]
        if (root / TASK_YAML).exists()
        else sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    )
    if not subdirs:
        return [f"{root}: no {TASK_YAML} and no task subdirectories"]
    out = []
    for sub in subdirs:
        if not (sub / TASK_YAML).exists():
            out.append(f"{sub}: not a task directory (no {TASK_YAML})")
            continue
        try:
            read_task_dir(sub)
        except TaskError as exc:
            out.append(str(exc))
    return out
