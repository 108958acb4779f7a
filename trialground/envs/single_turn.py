"""The single-turn environment: the completion is the submission.

``reset(task)`` returns the prompt; ``step(completion)`` grades and always ends the episode. For
``code_tests`` tasks the program is extracted from the completion with `extract_code` (last python fenced
block, else last fenced block, else the raw text); for every other verifier the completion is passed
unchanged (answer extraction belongs to the verifier). The episode ends with an `EpisodeEnd` holding the
grading, or the infrastructure failure that prevented it.
"""

from __future__ import annotations

from trialground.envs.base import Environment, EpisodeEnd, Forkable, Grading, Observation
from trialground.envs.text import extract_code
from trialground.errors import EnvError, ErrorInfo, TrialgroundError, VerifierError
from trialground.tasks.model import Task


class SingleTurnEnv(Environment, Forkable):
    def __init__(self, grader: Grading) -> None:
        self.grader = grader
        self.task: Task | None = None
        self.done = False
        self.error: ErrorInfo | None = None
        self._revoked: ErrorInfo | None = None

    def revoke(self, info: ErrorInfo) -> None:
        """Called by the pool when the lease expired: every later step ends the episode with `info`."""
        self._revoked = info

    @property
    def failed(self) -> bool:
        return self.error is not None

    async def reset(self, task: Task) -> Observation:
        self.task, self.done, self.error = task, False, None
        return Observation(text=task.prompt)

    def submission_of(self, completion: str) -> str:
        assert self.task is not None
        return extract_code(completion) if self.task.verifier.kind == "code_tests" else completion

    async def step(self, action: str) -> Observation:
        if self._revoked is not None:
            self.done = True
            return self._end("environment reclaimed", "reclaimed", error=self._revoked)
        if self.task is None:
            err = EnvError("step() before reset()", kind="not_reset").info()
            return self._end("episode not started", "not_started", error=err)
        if self.done:
            return Observation(text="the episode is over", done=True, turn=1)  # nothing more is graded
        self.done = True
        try:
            graded = await self.grader.grade(self.task, self.submission_of(action))
        except TrialgroundError as e:
            return self._end("grading failed", "submitted", error=e.info())
        except Exception as e:
            err = VerifierError(f"grader raised {type(e).__name__}: {e}", kind="grader_exception").info()
            return self._end("grading failed", "submitted", error=err)
        end = EpisodeEnd(finish_reason="submitted", graded=graded, error=graded.verdict.error)
        return Observation(text=graded.verdict.detail, done=True, turn=1, end=end)

    def _end(self, text: str, reason: str, *, error: ErrorInfo | None = None) -> Observation:
        end = EpisodeEnd(finish_reason=reason, error=error)
        return Observation(text=text, done=True, turn=1 if self.done else 0, end=end)

    async def snapshot(self) -> tuple[Task | None, bool]:
        return (self.task, self.done)

    async def rollback(self, snap: tuple[Task | None, bool]) -> None:
        self.task, self.done = snap

    async def fork(self, n: int) -> list[SingleTurnEnv]:
        out = []
        for _ in range(n):
            env = SingleTurnEnv(self.grader)
            env.task, env.done = self.task, self.done
            out.append(env)
        return out

    async def close(self) -> None:
        self.task = None
