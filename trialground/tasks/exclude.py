"""Exclusion files: task ids a run never samples (written by `trialground tasks audit --exclude-out`).

One task id a line, optionally followed by `# why`; blank lines and lines starting with `#` are ignored:

    # trialground tasks audit ops -n 60 (2026-12-07)
    3f2a9c0e1b7d4a55  # paid: exit_at_import, syntax_error

A run names them in `tasks.exclude_files`; `load_task_sets` drops those tasks from training and evaluation
before anything is sampled. An id that names no task of the run is fine (an audit may cover more sources
than one run uses); a line that is not a task id is an error naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from trialground.errors import TaskError

_ID = re.compile(r"[0-9a-f]{16}")


def read_excluded(path: str | Path) -> frozenset[str]:
    """The task ids `path` lists; `TaskError` when it cannot be read or a line is not a task id."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: cannot read the exclusion file: {e}", kind="bad_file") from e
    ids: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        if not _ID.fullmatch(entry):
            raise TaskError(
                f"{path}:{n}: {entry[:40]!r} is not a task id (16 hex digits, then an optional '# reason')",
                kind="bad_file",
            )
        ids.add(entry)
    return frozenset(ids)


def write_excluded(path: str | Path, entries: Iterable[tuple[str, str]], *, header: str = "") -> int:
    """Writes `(task id, reason)` lines (deduplicated, in order) and returns how many."""
    seen: dict[str, str] = {}
    for task_id, reason in entries:
        seen.setdefault(task_id, reason)
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{tid}  # {' '.join(reason.split())}" if reason else tid for tid, reason in seen.items()]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(seen)
