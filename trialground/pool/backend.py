"""Where the pool's sandboxes come from. One small interface; one module per backend.

`SandboxBackend.create(task)` returns a sandbox whose workspace holds the task's files and visible checks
(`trialground.envs.tool_env.workspace_files`). Failures raise `SandboxError`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

from trialground.envs.tool_env import workspace_files
from trialground.errors import SandboxError, TrialgroundError
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.tasks.model import Task


class SandboxBackend(abc.ABC):
    @abc.abstractmethod
    async def create(self, task: Task) -> Sandbox:
        """A new sandbox prepared for `task`."""

    async def start(self) -> None:
        """Acquire backend resources (workers); idempotent."""
        return None

    async def close(self) -> None:
        """Free backend resources. Sandboxes it created must already be closed."""
        return None

    def metrics(self) -> dict[str, float]:
        return {}


class LocalBackend(SandboxBackend):
    """Sandboxes in this process, from `trialground.sandbox.factory.open_sandbox`."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    async def open(self, files: Mapping[str, str | bytes]) -> Sandbox:
        from trialground.sandbox.factory import open_sandbox  # late: the factory pulls in every backend

        try:
            return await open_sandbox(self.config, files)
        except TrialgroundError:
            raise
        except Exception as e:
            raise SandboxError(
                f"could not open a sandbox: {type(e).__name__}: {e}", kind="open_failed"
            ) from e

    async def create(self, task: Task) -> Sandbox:
        return await self.open(workspace_files(task))
