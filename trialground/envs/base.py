"""The environment interface: reset(task) -> observation; step(action) -> observation."""

from __future__ import annotations

import abc
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trialground.tasks.model import Task
from trialground.verify.base import Reward, Verdict


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
