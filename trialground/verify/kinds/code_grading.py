"""The resource the `code_tests` kind (and the gameable `failed_tests`, which grades the same way) owns:
its grading sandboxes (`CodeTestsVerifier`), the batcher that runs many single-turn gradings in one
sandbox exec, and the sharing of identical gradings still in flight. One per grader, made on the first
code grading (`trialground.verify.kinds.context`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from trialground.microbatch import Batcher
from trialground.tasks.model import Task
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.code_jobs import solution_path
from trialground.verify.kinds.code_tests import CodeTestsVerifier
from trialground.verify.verdict import Verdict

if TYPE_CHECKING:
    from trialground.verify.kinds.context import GradingContext


class CodeGrading:
    """Code gradings of one grader: `verifier` runs them, `batcher` groups single-turn ones."""

    def __init__(self, context: GradingContext) -> None:
        self.grading: GradingConfig = context.grading
        self.verifier = CodeTestsVerifier(context.sandbox_config, self.grading, context.opener)
        # Keyed on the task's limits: one exec runs under one set. A run's tasks mostly share one (a task
        # family sets its limits once, or none), so this rarely cuts a batch; gradings of tasks with their
        # own limits still batch among themselves instead of each paying an exec of its own.
        self.batcher: Batcher[tuple[Task, str], Verdict] = Batcher(
            self.verifier.verify_many,
            max_batch=self.grading.max_batch,
            window_s=self.grading.batch_window_s,
            key=lambda item: self.verifier.limits(item[0]),
            even=True,
        )
        # single-turn code gradings in flight, by (task id, submission): identical ones share the first
        self._inflight: dict[tuple[str, str], tuple[Task, asyncio.Future[Verdict]]] = {}

    async def text(self, task: Task, submission: str) -> Verdict:
        """A single-turn code grading: through the shared batcher (many gradings, one sandbox exec) where
        sandboxes are reused, else in a sandbox of its own. A solution that does not compile is decided on
        the host (`CodeTestsVerifier.host_verdict`). With `grading.share_identical`, a grading of the same
        text for the same task that is still in flight is awaited instead of run again; its verdict comes
        back marked `shortcut="shared"`."""
        host = self.verifier.host_verdict(task, {**task.files, solution_path(task): submission})
        if host is not None:  # it does not compile (`grading.precheck_syntax`): no sandbox run at all
            return host
        if not self.grading.share_identical:
            return await self._run(task, submission)
        key = (task.id, submission)
        running = self._inflight.get(key)
        if running is not None and (running[0] is task or running[0] == task):
            verdict = await asyncio.shield(running[1])  # one caller's cancellation is not the others'
            return verdict if verdict.error is not None else verdict.model_copy(update={"shortcut": "shared"})
        future = asyncio.ensure_future(self._run(task, submission))
        self._inflight[key] = (task, future)

        def done(f: asyncio.Future[Verdict]) -> None:
            if self._inflight.get(key, (None, None))[1] is f:
                del self._inflight[key]
            if not f.cancelled():
                f.exception()  # retrieved: every caller may have gone away

        future.add_done_callback(done)
        return await asyncio.shield(future)

    async def _run(self, task: Task, submission: str) -> Verdict:
        if self.verifier.batching:
            return await self.batcher.submit((task, submission))
        return await self.verifier.verify(task, submission)

    async def close(self) -> None:
        await self.batcher.close()
        await self.verifier.close()
