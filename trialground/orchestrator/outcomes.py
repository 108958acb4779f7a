"""After each step: the task pool learns each task's outcomes, and the regression loop is written down.

- every valid attempt updates the task's pass rate (difficulty bands);
- a trajectory with a flag of severity `hack` is appended to `flagged.jsonl` (`Monitor.record_flagged`,
  its flags and evidence) and its task goes to the pool's regression queue (reason `flagged`);
- a task the policy forgot (`TaskPool.record_group`: pass rate at least `tasks.requeue_pass_rate`, then a
  whole group failed) is queued by the pool itself (reason `forgotten`);
- with `loop.eval_feedback`, evaluation tasks that failed every sample are queued (reason `eval_failure`).

Every queued task is one `queued` event in `regressions.jsonl` (`Monitor.record_regressions`); the report's
"Regression loop" table reads later attempts from the trajectories.
"""

from __future__ import annotations

from collections.abc import Sequence

from trialground.monitor.monitor import Monitor
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task
from trialground.tasks.pool import Attempt, TaskPool


def attempts(group: Sequence[Trajectory]) -> list[Attempt]:
    """A group's scored trajectories as the task pool sees them (infrastructure failures are no attempt)."""
    return [
        Attempt(t.reward.solved, tuple((f.name, f.evidence) for f in t.reward.flags if f.severity == "hack"))
        for t in group
        if t.ok and t.reward is not None
    ]


def record_outcomes(
    pool: TaskPool,
    monitor: Monitor | None,
    step: int,
    tasks: Sequence[Task],
    groups: Sequence[Sequence[Trajectory]],
) -> None:
    observed = pool.observe(tasks, [attempts(g) for g in groups])
    if monitor is None:
        return
    for task_id, flags in sorted(observed.flagged.items()):
        names = sorted({name for name, _ in flags})
        monitor.record_flagged(step, task_id, names, [f"{name}: {evidence}" for name, evidence in flags])
        monitor.record_regressions(step, [task_id], "flagged", ", ".join(names))
    if observed.forgotten:
        monitor.record_regressions(step, observed.forgotten, "forgotten", "a whole group failed")


def record_eval(
    pool: TaskPool,
    monitor: Monitor | None,
    step: int,
    eval_tasks: Sequence[Task],
    failed_task_ids: Sequence[str],
) -> None:
    """Evaluation failures fed to training (the caller decides: `loop.eval_feedback`): doing so lets the
    held-out metric see tasks that training also saw, so it is off by default."""
    if not failed_task_ids:
        return
    pool.add_regressions(list(failed_task_ids), tasks=eval_tasks)
    if monitor is not None:
        monitor.record_regressions(step, list(failed_task_ids), "eval_failure", "every eval sample failed")
