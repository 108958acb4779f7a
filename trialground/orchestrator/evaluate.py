"""Evaluation on the held-out split: pass@k overall and per domain, and the tasks that failed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trialground.monitor.eval_stats import EvalOutcome, summarise
from trialground.orchestrator.collect import Collector
from trialground.policy.base import SamplingParams
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task


def _solved(group: Sequence[Trajectory]) -> int:
    return sum(t.reward is not None and t.reward.solved for t in group)


@dataclass(frozen=True)
class EvalResult:
    metrics: dict[str, float]
    failed_task_ids: list[str] = field(default_factory=list)
    infra_errors: int = 0
    trajectories: tuple[Trajectory, ...] = ()  # every episode, task by task (the run writes them)


async def evaluate(
    collector: Collector,
    tasks: Sequence[Task],
    *,
    params: SamplingParams,
    samples: int = 1,
    prefix: str = "eval",
    on_task: Callable[[], None] | None = None,
) -> EvalResult:
    """`{prefix}/pass@1`, `{prefix}/pass@{samples}` (over tasks with that many valid samples), per-domain
    values, `{prefix}/n_tasks` and the infra error rate.

    Infrastructure failures are left out of the estimate (and counted), never scored as wrong answers.
    `on_task` is called as each task's samples are done (a progress count).
    """
    if not tasks:
        return EvalResult(metrics={})
    groups = await collector.collect(tasks, samples, params, on_group=on_task)
    outcomes: list[EvalOutcome] = []
    errors = 0
    for task, group in zip(tasks, groups, strict=True):
        valid = [t for t in group if t.error is None]
        errors += len(group) - len(valid)
        if valid:
            outcomes.append(
                EvalOutcome(
                    task.id,
                    task.domain,
                    len(valid),
                    sum(t.reward is not None and t.reward.solved for t in valid),
                )
            )
    metrics = summarise(outcomes, ks=sorted({1, samples}), prefix=prefix)
    metrics[f"{prefix}/infra_error_rate"] = errors / max(1, len(tasks) * samples)
    failed = [o.task_id for o in outcomes if o.correct == 0]
    episodes = tuple(t for group in groups for t in group)
    return EvalResult(metrics=metrics, failed_task_ids=failed, infra_errors=errors, trajectories=episodes)
