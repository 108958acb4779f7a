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

from trialground.orchestrator.components import Components
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task


def record_outcomes(
    c: Components, step: int, tasks: Sequence[Task], groups: Sequence[Sequence[Trajectory]]
) -> None:
    observed = c.tasks.observe(tasks, groups)
    if c.monitor is None:
        return
    for task_id, flags in sorted(observed.flagged.items()):
        names = sorted({f.name for f in flags})
        c.monitor.record_flagged(step, task_id, names, [f"{f.name}: {f.evidence}" for f in flags])
        c.monitor.record_regressions(step, [task_id], "flagged", ", ".join(names))
    if observed.forgotten:
        c.monitor.record_regressions(step, observed.forgotten, "forgotten", "a whole group failed")


def record_eval(c: Components, step: int, failed_task_ids: Sequence[str]) -> None:
    """Evaluation failures feed training only when asked (`loop.eval_feedback`): doing so lets the
    held-out metric see tasks that training also saw, so it is off by default."""
    if not c.config.loop.eval_feedback or not failed_task_ids:
        return
    c.tasks.add_regressions(list(failed_task_ids), tasks=c.eval_tasks)
    if c.monitor is not None:
        c.monitor.record_regressions(step, list(failed_task_ids), "eval_failure", "every eval sample failed")
