"""Evaluation on the held-out split: pass@k overall and per domain, and the tasks that failed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trialground.monitor.eval_stats import pass_at_k
from trialground.orchestrator.collect import collect
from trialground.orchestrator.components import Components
from trialground.policy.base import SamplingParams
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task


@dataclass(frozen=True)
class EvalResult:
    metrics: dict[str, float]
    failed_task_ids: list[str] = field(default_factory=list)
    infra_errors: int = 0


def _passed(t: Trajectory) -> bool:
    return t.reward is not None and t.reward.outcome > 0 and t.reward.total > 0


async def evaluate(
    c: Components,
    tasks: Sequence[Task],
    *,
    params: SamplingParams,
    samples: int = 1,
    prefix: str = "eval",
) -> EvalResult:
    """`{prefix}/pass@1`, `{prefix}/pass@{samples}`, per-domain pass@1 and the infra error rate.

    Infrastructure failures are left out of the estimate (and counted), never scored as wrong answers.
    """
    if not tasks:
        return EvalResult(metrics={})
    groups = await collect(c, tasks, samples, params)
    per_task: list[tuple[Task, int, int]] = []
    errors = 0
    for task, group in zip(tasks, groups, strict=True):
        valid = [t for t in group if t.error is None]
        errors += len(group) - len(valid)
        if valid:
            per_task.append((task, len(valid), sum(_passed(t) for t in valid)))
    metrics: dict[str, float] = {f"{prefix}/tasks": float(len(per_task))}
    metrics[f"{prefix}/infra_error_rate"] = errors / max(1, len(tasks) * samples)
    if per_task:
        metrics[f"{prefix}/pass@1"] = float(np.mean([pass_at_k(n, k, 1) for _, n, k in per_task]))
        if samples > 1:
            metrics[f"{prefix}/pass@{samples}"] = float(
                np.mean([pass_at_k(n, k, min(samples, n)) for _, n, k in per_task])
            )
        by_domain: dict[str, list[float]] = defaultdict(list)
        for task, n, k in per_task:
            by_domain[task.domain].append(pass_at_k(n, k, 1))
        for domain, values in by_domain.items():
            metrics[f"{prefix}/pass@1/{domain}"] = float(np.mean(values))
    failed = [task.id for task, _, k in per_task if k == 0]
    return EvalResult(metrics=metrics, failed_task_ids=failed, infra_errors=errors)
