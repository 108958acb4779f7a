"""Canaries at evaluation cadence: the run's canary set (`trialground.verify.detectors.canary`) re-scored with
the run's grader and judge at every evaluation, logged as `canary/*` with the evaluation's metrics."""

from __future__ import annotations

from trialground.orchestrator.components import Components
from trialground.verify.detectors.canary import canary_set, rescore


async def canary_metrics(c: Components, step: int) -> dict[str, float]:
    """`canary/*` for this evaluation; empty with `reward.canaries: 0` or no eval task with a reference."""
    n = c.config.reward.canaries
    if n <= 0:
        return {}
    return await rescore(c.grader, canary_set(c.eval_tasks, n), step=step)
