"""The default sink: `metrics.jsonl`, one JSON object per step with `step`, `time` and the metrics."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf; null keeps the line parseable by browsers and strict readers.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlSink:
    """Appends (so a resumed run continues its file) and flushes every line (so readers see it live)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f = path.open("a")

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        row: dict[str, Any] = {"step": step, "time": time.time()}
        row.update({k: _clean(v) for k, v in metrics.items() if k not in ("step", "time")})
        self._f.write(json.dumps(row, sort_keys=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, skipping lines that do not parse (a run killed mid-write)."""
    if not path.is_file():
        return []
    rows: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a `metrics.jsonl` (see `read_jsonl`) that carry an integer `step`."""
    return [row for row in read_jsonl(path) if isinstance(row.get("step"), int)]
