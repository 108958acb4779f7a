"""The regression loop's record: `regressions.jsonl`.

What goes back to the task pool's regression queue is decided once, in `trialground.orchestrator.outcomes`
(flagged trajectories, tasks the policy forgot, and with `loop.eval_feedback` failed evaluation tasks);
it logs each queued task with `Monitor.record_regressions`. The report then shows what came back and
whether it was solved later.

`regressions.jsonl`, one JSON object per line, two kinds of event:

    {"event": "queued", "step": 12, "task_id": "ab12..", "reason": "flagged" | "forgotten" | "eval_failure",
     "detail": "..", "time": 1700000000.0}
    {"event": "attempt", "step": 15, "task_id": "ab12..", "solved": false, "reward": 0.0, "time": ..}

`attempt` events are optional: when absent, the report reads later attempts from `trajectories/*.parquet`
(a row with the task id at a later step; solved when its `outcome` (else `reward`) is > 0).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trialground.monitor.sinks.jsonl import read_jsonl


class RegressionLog:
    """Appends events to `regressions.jsonl` (created on the first event)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _append(self, row: dict[str, Any]) -> None:
        row["time"] = time.time()
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def queued(self, step: int, task_id: str, reason: str, detail: str = "") -> None:
        self._append(
            {"event": "queued", "step": step, "task_id": task_id, "reason": reason, "detail": detail}
        )

    def attempt(self, step: int, task_id: str, solved: bool, reward: float | None = None) -> None:
        self._append(
            {"event": "attempt", "step": step, "task_id": task_id, "solved": solved, "reward": reward}
        )


def read_events(path: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(path) if r.get("event") in ("queued", "attempt") and "task_id" in r]
