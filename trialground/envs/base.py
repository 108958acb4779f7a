"""The environment interface: reset(task) -> observation; step(action) -> observation."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trialground.sandbox.base import Sandbox
from trialground.tasks.model import Task
from trialground.verify.reward.model import Reward
from trialground.verify.verdict import Action, Verdict


class Observation(BaseModel):
    """What the agent sees after reset or a step. `reward`/`verdict` are set when `done`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    done: bool = False
    reward: Reward | None = None
    verdict: Verdict | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class Environment(abc.ABC):
    """One episode at a time over one task."""

    @abc.abstractmethod
    async def reset(self, task: Task) -> Observation:
        """Start an episode on `task`; the observation holds the prompt."""

    @abc.abstractmethod
    async def step(self, action: str) -> Observation:
        """Apply the model's text; a malformed action is an observation, never an exception."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the sandbox and everything else the environment holds."""


class Grading(Protocol):
    """What environments need from the grader (`trialground.verify.grader.Grader` satisfies it)."""

    async def grade(
        self,
        task: Task,
        submission: str,
        *,
        workspace: Sandbox | None = None,
        actions: Sequence[Action] = (),
    ) -> tuple[Verdict, Reward]: ...


class Forkable(abc.ABC):
    """Mid-episode state control: snapshot / rollback / fork.

    `snapshot()` captures the workspace and the episode (history, counters, clock) at a turn boundary;
    `rollback(snap)` makes both byte-identical to that point again (the snapshot stays valid, so it can be
    rolled back to repeatedly); `fork(n)` returns n new environments continuing independently from the
    current state, each in its own sandbox and owned by the caller, who must `close()` them.
    """

    @abc.abstractmethod
    async def snapshot(self) -> Any:
        """An opaque snapshot of the current episode state."""

    @abc.abstractmethod
    async def rollback(self, snap: Any) -> None:
        """Return the episode (workspace included) to `snap`."""

    @abc.abstractmethod
    async def fork(self, n: int) -> list[Any]:
        """n independent continuations of the current state."""
