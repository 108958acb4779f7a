"""Canaries at evaluation cadence: the run's canary set (`trialground.verify.detectors.canary`) re-scored with
the run's grader and judge at every evaluation, logged as `canary/*` with the evaluation's metrics."""

from __future__ import annotations

from collections.abc import Sequence

from trialground.tasks.model import Task
from trialground.verify.detectors.canary import canary_set, rescore
from trialground.verify.grader import Grader


async def canary_metrics(grader: Grader, eval_tasks: Sequence[Task], n: int, step: int) -> dict[str, float]:
    """`canary/*` for this evaluation; empty with `n` 0 (`reward.canaries`) or no eval task with a
    reference."""
    if n <= 0:
        return {}
    return await rescore(grader, canary_set(list(eval_tasks), n), step=step)
