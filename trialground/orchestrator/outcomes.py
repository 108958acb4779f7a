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


def queue_online_failures(pool: TaskPool, monitor: Monitor | None, files: Sequence[str], seed: int) -> None:
    """At the start of a run: the tasks of `tasks.regression_files` (recorded failures, `tasks
    from-failures`) join the regression queue, each logged as `online_failure` with its origin."""
    from trialground.tasks.sources import load_source

    for path in files:
        tasks = load_source(path, seed=seed)
        pool.add_regressions([t.id for t in tasks], tasks=tasks)
        if monitor is not None:
            for t in tasks:
                monitor.record_regressions(
                    0, [t.id], "online_failure", f"{t.metadata.get('origin')} ({path})"
                )


def online_failure_metrics(tasks: Sequence[Task], groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
    """`regressions/online_episodes` and `regressions/online_pass_rate`: this step's episodes of tasks made
    from recorded failures (`trialground.tasks.failures`), when any were drawn."""
    from trialground.tasks.failures import is_online_failure

    graded = [t for task, g in zip(tasks, groups, strict=True) if is_online_failure(task) for t in g if t.ok]
    if not graded:
        return {}
    passed = sum(t.reward is not None and t.reward.solved for t in graded)
    return {
        "regressions/online_episodes": float(len(graded)),
        "regressions/online_pass_rate": passed / len(graded),
    }
