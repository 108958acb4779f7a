"""The single-turn environment: the completion is the submission.

``reset(task)`` returns the prompt; ``step(completion)`` grades and always ends the episode. For
``code_tests`` tasks the program is extracted from the completion with `extract_code` (last python fenced
block, else last fenced block, else the raw text); for every other verifier the completion is passed
unchanged (answer extraction belongs to the verifier). Grading failures are recorded in ``info["error"]``.
"""

from __future__ import annotations

from typing import Any

from trialground.envs.base import Environment, Forkable, Grading, Observation
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
        return Observation(text=task.prompt, info={"turn": 0})

    def submission_of(self, completion: str) -> str:
        assert self.task is not None
        return extract_code(completion) if self.task.verifier.kind == "code_tests" else completion

    async def step(self, action: str) -> Observation:
        if self._revoked is not None:
            self.done = True
            return Observation(
                text="environment reclaimed", done=True, info=self._info("reclaimed", self._revoked)
            )
        if self.task is None:
            err = EnvError("step() before reset()", kind="not_reset").info()
            return Observation(text="episode not started", done=True, info=self._info("not_started", err))
        if self.done:
            return Observation(text="the episode is over", done=True, info=self._info("submitted", None))
        self.done = True
        try:
            verdict, reward = await self.grader.grade(self.task, self.submission_of(action))
        except TrialgroundError as e:
            return Observation(text="grading failed", done=True, info=self._info("submitted", e.info()))
        except Exception as e:
            err = VerifierError(f"grader raised {type(e).__name__}: {e}", kind="grader_exception").info()
            return Observation(text="grading failed", done=True, info=self._info("submitted", err))
        return Observation(
            text=verdict.detail,
            done=True,
            reward=reward,
            verdict=verdict,
            info=self._info("submitted", verdict.error),
        )

    def _info(self, reason: str, error: ErrorInfo | None) -> dict[str, Any]:
        return {"finish_reason": reason, "error": error, "turn": 1 if self.done else 0}

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
