"""The regression loop: evaluation failures and flagged tasks go back to the task pool's regression queue.

`select_regressions` picks the task ids; the training loop hands them to the pool and logs them with
`Monitor.record_regressions`. The report then shows what came back and whether it was solved later.

`regressions.jsonl`, one JSON object per line, two kinds of event:

    {"event": "queued", "step": 12, "task_id": "ab12..", "reason": "eval_failure" | "flagged", "detail": "..",
     "time": 1700000000.0}
    {"event": "attempt", "step": 15, "task_id": "ab12..", "solved": false, "reward": 0.0, "time": ..}

`attempt` events are optional: when absent, the report reads later attempts from `trajectories/*.parquet`
(a row with the task id at a later step; solved when its `outcome` (else `reward`) is > 0).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialground.monitor.eval_stats import EvalOutcome
from trialground.monitor.sinks.jsonl import read_jsonl


@dataclass(frozen=True)
class FlaggedTask:
    task_id: str
    flags: tuple[str, ...]


def select_regressions(
    eval_results: Iterable[EvalOutcome],
    flagged: Iterable[FlaggedTask] = (),
    *,
    held_out: Collection[str] = (),
    max_pass_rate: float = 0.0,
    limit: int | None = None,
) -> list[str]:
    """Task ids for the regression queue: flagged tasks first (most flags first), then eval failures.

    An eval failure is a task whose pass rate (correct / samples) is <= `max_pass_rate`. Ids in `held_out`
    — the independent evaluation set — are never returned, so training never sees held-out tasks; pass
    eval results of training-split tasks (re-evaluated) to feed their failures back. Order is stable;
    each id appears once; at most `limit` ids.
    """
    held = set(held_out)
    counts: dict[str, int] = {}
    for f in flagged:
        if f.task_id not in held:
            counts[f.task_id] = counts.get(f.task_id, 0) + max(1, len(f.flags))
    picked = sorted(counts, key=lambda t: -counts[t])
    failures = sorted(
        (r for r in eval_results if r.task_id not in held and r.n > 0 and r.correct / r.n <= max_pass_rate),
        key=lambda r: r.correct / r.n,
    )
    seen = set(picked)
    for r in failures:
        if r.task_id not in seen:
            seen.add(r.task_id)
            picked.append(r.task_id)
    return picked if limit is None else picked[:limit]


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
