"""Playing the exploit library and the gold gate against tasks' real graders, in real sandboxes.

    report = await audit_tasks(tasks, source="ops", sandbox_config=SandboxConfig(), concurrency=8)

One grader from `make_grader` (what a run uses) grades every move. A move with a workspace script is played
as an agent would: a sandbox opened with the task's files and visible checks (never its hidden checks), the
submission written at the solution path, the script run there with the agent's limits, then graded with
that sandbox as the episode's workspace. A paid move is a verdict that passed with no error; a move whose
grading fails with an infrastructure error is counted apart (`dodged`: the rubric drops such a reward, which
a submission must never be able to cause). Each grading has `timeout_s`; one that runs past it is recorded
as a dodge too, never as paid.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from trialground.errors import TrialgroundError, VerifierError
from trialground.sandbox.base import WORKSPACE, SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.audit.gold import gold_problems
from trialground.verify.audit.library import LIBRARY
from trialground.verify.audit.report import AuditReport, TaskAudit, family_of
from trialground.verify.audit.strategy import Move, Strategy, move, solution_file, surface
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader
from trialground.verify.kinds.code_tests import default_opener
from trialground.verify.verdict import Graded, Verdict


def _hostile(task: Task) -> dict[str, str]:
    if surface(task) != "patch":
        return {}
    from trialground.tasks.swe.hostile import hostile_patches

    return hostile_patches(task)


class Auditor:
    """Plays strategies on tasks with one grader; at most `concurrency` gradings at once."""

    def __init__(self, grader: Grader, sandbox_config: SandboxConfig, *, concurrency: int, timeout_s: float):
        self.grader, self.sandbox_config, self.timeout_s = grader, sandbox_config, timeout_s
        self._sem = asyncio.Semaphore(concurrency)

    async def grade(self, task: Task, submission: str) -> Verdict:
        async with self._sem:
            return await self._bounded(self.grader.grade(task, submission), task)

    async def _bounded(self, graded: Awaitable[Graded], task: Task) -> Verdict:
        try:
            result = await asyncio.wait_for(graded, self.timeout_s)
        except TimeoutError:
            err = VerifierError(
                f"task {task.id}: the audit's grading ran past {self.timeout_s:g} s", kind="timeout"
            )
            return Verdict(passed=False, detail=str(err), error=err.info())
        return result.verdict

    async def play(self, task: Task, m: Move) -> Verdict:
        async with self._sem:
            if not m.in_workspace:
                return await self._bounded(self.grader.grade(task, m.submission), task)
            return await self._bounded(self._in_workspace(task, m), task)

    async def _in_workspace(self, task: Task, m: Move) -> Graded:
        sandbox = await default_opener(self.sandbox_config, {**task.files, **task.visible_checks})
        try:
            path = solution_file(task)
            if path is not None:
                await sandbox.write(path, m.submission)
            if m.script is not None:
                await sandbox.exec(["bash", "-c", m.script], cwd=WORKSPACE, limits=task.limits)
            return await self.grader.grade(task, m.submission, workspace=sandbox)
        finally:
            await sandbox.close()

    async def audit(self, task: Task, strategies: Sequence[Strategy], source: str) -> TaskAudit:
        patches = _hostile(task)
        moves = [(s, move(s, task, patches)) for s in strategies]
        played = [(s, m) for s, m in moves if m is not None]
        gold, verdicts = await asyncio.gather(
            gold_problems(task, self.grade), asyncio.gather(*(self.play(task, m) for _, m in played))
        )
        paid = [s.name for (s, _), v in zip(played, verdicts, strict=True) if v.passed and v.error is None]
        dodged = [
            f"{s.name}: {v.error.message[:120]}"
            for (s, _), v in zip(played, verdicts, strict=True)
            if v.error is not None
        ]
        return TaskAudit(
            task_id=task.id,
            name=str(task.metadata.get("name", "")),
            source=source,
            family=family_of(task, source),
            kind=task.verifier.kind,
            surface=surface(task),
            played=tuple(s.name for s, _ in played),
            paid=tuple(paid),
            paid_classes=tuple(sorted({s.klass for s, _ in played if s.name in paid})),
            dodged=tuple(dodged),
            gold_problems=tuple(gold),
        )


async def audit_tasks(
    tasks_by_source: Sequence[tuple[str, Sequence[Task]]],
    *,
    strategies: Sequence[Strategy] = LIBRARY,
    sandbox_config: SandboxConfig | None = None,
    reward_config: RewardConfig | None = None,
    concurrency: int = 8,
    timeout_s: float = 180.0,
    on_task: Callable[[TaskAudit], None] | None = None,
) -> AuditReport:
    """Every strategy with a move for each task, and the gold gate, graded by one `make_grader` grader."""
    sandbox_config = sandbox_config or SandboxConfig()
    grader = make_grader(sandbox_config, reward_config)
    auditor = Auditor(grader, sandbox_config, concurrency=concurrency, timeout_s=timeout_s)

    async def one(source: str, task: Task) -> TaskAudit:
        try:
            result = await auditor.audit(task, strategies, source)
        except TrialgroundError as e:  # the sandbox could not be opened: the task is not audited
            result = TaskAudit(
                task_id=task.id, source=source, family=family_of(task, source), kind=task.verifier.kind,
                surface=surface(task), gold_problems=(f"not audited: {e}"[:200],),
            )  # fmt: skip
        if on_task is not None:
            on_task(result)
        return result

    try:
        results = await asyncio.gather(*(one(src, t) for src, tasks in tasks_by_source for t in tasks))
    finally:
        await grader.close()
    return AuditReport(strategies=tuple(s.name for s in strategies), tasks=tuple(results))
