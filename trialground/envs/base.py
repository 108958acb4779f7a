"""The environment interface: reset(task) -> observation; step(action) -> observation."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trialground.errors import ErrorInfo
from trialground.sandbox.base import Sandbox
from trialground.tasks.model import Task
from trialground.verify.verdict import Action, Graded


class EpisodeStart(BaseModel):
    """What `reset` tells the agent loop besides the prompt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: str | None = Field(None, description="A system message to render before the prompt")
    tools: tuple[dict[str, object], ...] | None = Field(
        None, description="The tools as JSON schemas, for chat templates that take `tools=`"
    )
    workspace_digest: str | None = Field(None, description="Hash of the workspace the episode starts from")


class CheckHashes(BaseModel):
    """Test-integrity evidence of a tool episode: the sha256 of each visible check file in the agent's
    workspace at the episode's start and at its end. An end entry is None when the file is gone or is no
    longer a readable regular file. Evidence only: grading runs the task's own copies of the checks and
    never reads these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: dict[str, str] = Field(description="Visible check path -> sha256 hex at the episode's start")
    end: dict[str, str | None] = Field(
        description="Visible check path -> sha256 hex at the episode's end (None: deleted or replaced)"
    )

    @property
    def changed(self) -> tuple[str, ...]:
        """The visible checks whose bytes at the end differ from the start, or that vanished."""
        return tuple(p for p in sorted(self.start) if self.end.get(p) != self.start[p])


class EpisodeEnd(BaseModel):
    """How an episode ended: the environment's typed result, scored by the rubric once the episode is over.

    `graded` is None when the episode ended without a grading (a limit without `grade_on_limit`); `error` is
    an infrastructure failure (the trajectory is then left out of training)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    finish_reason: str = Field(description="submitted, max_turns, time_limit, error, ...")
    graded: Graded | None = None
    actions: tuple[Action, ...] = Field((), description="The episode's tool actions (process, efficiency)")
    tool_calls: int = Field(0, ge=0, description="Tool calls that ran")
    invalid_calls: int = Field(
        0,
        ge=0,
        description="The model's failures to act: calls that could not be parsed (broken, too large or too "
        "deep JSON), named no known tool or lacked parameters, calls over the per-message limit, and "
        "messages with no call at all",
    )
    error: ErrorInfo | None = None
    visible_checks: CheckHashes | None = Field(
        None, description="Hashes of the visible checks at the start and end (tool environments)"
    )


class Observation(BaseModel):
    """What the agent sees after reset or a step. `start` is set by `reset`, `end` when `done`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    done: bool = False
    turn: int = Field(0, ge=0, description="Policy turns taken so far")
    exec_failed: bool = Field(False, description="A command the policy ran failed (a branch point)")
    start: EpisodeStart | None = None
    end: EpisodeEnd | None = None


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
    ) -> Graded: ...


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
