"""Reading and writing task files: JSONL (one task per line) and the directory form.

JSONL: one JSON object per line with the `Task` fields by name (`id`, `domain`, `prompt`, `files`,
`visible_checks`, `hidden_checks`, `reference`, `verifier`, `limits`, `split`, `metadata`). Blank lines
are allowed; every other line must be a valid task.

Directory form, one task per directory::

    task.yaml          every field except files/checks (reference may instead live in reference.txt)
    reference.txt      optional: the reference solution, verbatim (not allowed together with `reference:`)
    files/...          workspace files -> Task.files        (key = path relative to files/)
    tests/visible/...  checks the agent may see and run -> Task.visible_checks (key relative to it)
    tests/hidden/...   checks only the grader runs -> Task.hidden_checks (key relative to it)

A collection is a directory whose subdirectories are task directories (sorted by name).

Contract: a broken file raises `TaskError` whose message starts with `FILE:LINE: FIELD: ...` (line when
known), and nothing is ever skipped silently. A stored `id` must equal the task's content hash: an id
that does not match means the file was edited without recomputing it, and grading records would point
at the wrong task.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trialground.errors import TaskError
from trialground.tasks.model import Task

TASK_YAML = "task.yaml"
REFERENCE_FILE = "reference.txt"
_DIR_PARTS = {"files": "files", "visible_checks": "tests/visible", "hidden_checks": "tests/hidden"}


def _describe(err: ValidationError) -> str:
    """The first error as `field.path: message`, then a count of the rest."""
    errors = err.errors()
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or "(task)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{field}: {first['msg']}{more}"


def task_from_dict(data: Any, where: str, *, check_id: bool = True) -> Task:
    """Validate one task mapping; `where` (e.g. `tasks.jsonl:7`) prefixes every error."""
    if not isinstance(data, dict):
        raise TaskError(f"{where}: expected a JSON object with the task fields, got {type(data).__name__}")
    try:
        task = Task.model_validate(data)
    except ValidationError as e:
        raise TaskError(f"{where}: {_describe(e)}", kind="invalid_task") from e
    if check_id and data.get("id") and task.id != task.content_hash():
        raise TaskError(
            f"{where}: id: {task.id!r} does not match the content hash {task.content_hash()!r} "
            "(remove the id to recompute it)",
            kind="invalid_task",
        )
    return task


STDIN_NAME = "<stdin>"  # how messages name standard input, read for the path `-`


def jsonl_rows(path: str | Path) -> Iterator[tuple[str, int, Any]]:
    """(`FILE:LINE`, line number, parsed value) of every non-blank line of a JSONL file, in order; `-`
    reads standard input (named `<stdin>`). Raises `TaskError` naming the file (unreadable) or the file
    and line (not UTF-8, not JSON)."""
    name, raw = read_raw(path)
    for lineno, line in enumerate(raw.splitlines(), start=1):
        where = f"{name}:{lineno}"
        data = parse_line(line, where)
        if data is not BLANK:
            yield where, lineno, data


BLANK = object()  # what `parse_line` returns for a blank line


def read_raw(path: str | Path) -> tuple[str, bytes]:
    """(name in messages, bytes) of a task file; `-` is standard input. Raises `TaskError` (unreadable)."""
    name = STDIN_NAME if str(path) == "-" else str(path)
    try:
        return name, sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
    except OSError as e:
        raise TaskError(f"{name}: cannot read: {e.strerror or e}", kind="unreadable") from e


def parse_line(line: bytes, where: str) -> Any:
    """One JSONL line's value (`BLANK` for a blank line). Raises `TaskError` at `where` (not UTF-8, not
    JSON)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(
            f"{where}: not UTF-8 (byte 0x{line[e.start]:02x} at column {e.start + 1})",
            kind="invalid_utf8",
        ) from e
    if not text.strip():
        return BLANK
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskError(f"{where}: (json): {e.msg} at column {e.colno}", kind="invalid_json") from e


def read_jsonl(path: str | Path, *, check_ids: bool = True) -> list[Task]:
    """Every task in a JSONL file, in file order. Raises `TaskError` at the first broken line."""
    return [task_from_dict(data, where, check_id=check_ids) for where, _, data in jsonl_rows(path)]


def write_jsonl(tasks: Iterable[Task], path: str | Path) -> int:
    """Write tasks one per line (fields by name, ids included). Returns the number written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for task in tasks:
            f.write(json.dumps(task.model_dump(mode="json"), ensure_ascii=False, sort_keys=False) + "\n")
            count += 1
    return count


def _read_tree(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    if not root.is_dir():
        raise TaskError(f"{root}: expected a directory", kind="invalid_task_dir")
    out: dict[str, str] = {}
    for file in sorted(root.rglob("*")):
        if file.is_dir():
            continue
        if file.is_symlink() or not file.is_file():
            raise TaskError(
                f"{file}: only regular files are allowed in a task directory", kind="invalid_file"
            )
        try:
            out[file.relative_to(root).as_posix()] = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise TaskError(
                f"{file}: not UTF-8 text (tasks hold text files only)", kind="invalid_file"
            ) from e
    return out


def read_task_dir(path: str | Path, *, check_ids: bool = True) -> Task:
    """One task from the directory form (see the module docstring)."""
    root = Path(path)
    meta_path = root / TASK_YAML
    try:
        data = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TaskError(f"{meta_path}: cannot read: {e}", kind="unreadable") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise TaskError(f"{meta_path}{line}: (yaml): {e}", kind="invalid_yaml") from e
    if not isinstance(data, dict):
        raise TaskError(f"{meta_path}: expected a mapping of task fields", kind="invalid_task")
    for field, sub in _DIR_PARTS.items():
        if field in data:
            raise TaskError(
                f"{meta_path}: {field}: belongs in {sub}/, not in {TASK_YAML}", kind="invalid_task"
            )
        data[field] = _read_tree(root / sub)
    ref_file = root / REFERENCE_FILE
    if ref_file.exists():
        if data.get("reference") is not None:
            raise TaskError(
                f"{meta_path}: reference: given both here and in {REFERENCE_FILE}", kind="invalid_task"
            )
        data["reference"] = ref_file.read_text(encoding="utf-8")
    tests = root / "tests"
    if tests.is_dir():
        stray = [p.name for p in tests.iterdir() if p.name not in ("visible", "hidden")]
        if stray:
            raise TaskError(
                f"{tests}: unexpected entries {stray}: checks go in tests/visible/ or tests/hidden/",
                kind="invalid_task_dir",
            )
    return _with_line(meta_path, data, check_ids)


def _with_line(meta_path: Path, data: dict[str, Any], check_ids: bool) -> Task:
    """Validate, and point at the line of the offending top-level key in task.yaml when possible."""
    try:
        return task_from_dict(data, str(meta_path), check_id=check_ids)
    except TaskError as e:
        cause = e.__cause__
        if isinstance(cause, ValidationError) and cause.errors()[0]["loc"]:
            key = str(cause.errors()[0]["loc"][0])
            line = _yaml_key_line(meta_path, key)
            if line is not None:
                raise TaskError(f"{meta_path}:{line}: {_describe(cause)}", kind="invalid_task") from cause
        raise


def _yaml_key_line(path: Path, key: str) -> int | None:
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith(f"{key}:"):
            return lineno
    return None


def write_task_dir(task: Task, path: str | Path) -> Path:
    """Write one task in the directory form. The directory must not exist or be empty."""
    root = Path(path)
    if root.exists() and any(root.iterdir()):
        raise TaskError(f"{root}: exists and is not empty", kind="exists")
    root.mkdir(parents=True, exist_ok=True)
    data = task.model_dump(mode="json", exclude={"files", "visible_checks", "hidden_checks", "reference"})
    (root / TASK_YAML).write_text(
        yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000), encoding="utf-8"
    )
    if task.reference is not None:
        (root / REFERENCE_FILE).write_text(task.reference, encoding="utf-8")
    top = root.resolve()
    for field, sub in _DIR_PARTS.items():
        for rel, text in getattr(task, field).items():
            target = root / sub / rel
            # The model refuses such names; this holds for a task made without validation too.
            if not target.resolve().is_relative_to(top) or "\0" in rel:
                raise TaskError(
                    f"{root}: {field}: {rel!r} is not beneath the task directory", kind="bad_path"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    return root


def read_task_dirs(path: str | Path, *, check_ids: bool = True) -> list[Task]:
    """A single task directory, or a collection of them (every subdirectory must be a task)."""
    root = Path(path)
    if not root.is_dir():
        raise TaskError(f"{root}: not a directory", kind="not_found")
    if (root / TASK_YAML).exists():
        return [read_task_dir(root, check_ids=check_ids)]
    subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not subdirs:
        raise TaskError(f"{root}: no {TASK_YAML} and no task subdirectories", kind="not_found")
    tasks = []
    for sub in subdirs:
        if not (sub / TASK_YAML).exists():
            raise TaskError(f"{sub}: not a task directory (no {TASK_YAML})", kind="invalid_task_dir")
        tasks.append(read_task_dir(sub, check_ids=check_ids))
    return tasks


def write_task_dirs(tasks: Iterable[Task], path: str | Path) -> list[Path]:
    """Write a collection: one subdirectory per task, named `<index>_<id>` so file order is kept."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    return [write_task_dir(task, root / f"{i:05d}_{task.id}") for i, task in enumerate(tasks)]


def read_tasks(path: str | Path, *, check_ids: bool = True) -> list[Task]:
    """A `.jsonl` file or a task directory/collection."""
    p = Path(path)
    if p.is_dir():
        return read_task_dirs(p, check_ids=check_ids)
    if not p.exists():
        raise TaskError(f"{p}: no such file or directory", kind="not_found")
    return read_jsonl(p, check_ids=check_ids)
