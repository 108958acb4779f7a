"""Where the pool's sandboxes come from. One small interface; one module per backend.

`SandboxBackend.create(task)` returns a sandbox whose workspace holds the task's files and visible checks
(`trialground.envs.tool_env.workspace_files`). Failures raise `SandboxError`. `reserve(leased, idle)` is
told how many sandboxes the pool may lease and keep idle at once, so a backend can make room on the host.

Open files: every sandbox of `LocalBackend` holds a few file descriptors in this process for as long as it
is open (with the fork-server launcher 5: its request and reply pipes, its stderr pipe, a pidfd and the
lock on its cgroup; `FDS_PER_SANDBOX` allows for more), so 1,024 of them need ~5,000 more than a bare
process, over the 1,024 soft `RLIMIT_NOFILE` most hosts start a process with. `reserve` raises the soft
limit, never above the hard limit and never lowering it, when the pool's most sandboxes (leased and idle)
need more; where the hard limit is too low for the leased ones alone it logs a warning at once
(`max_idle` is a cap, often set far above what a run keeps), and a sandbox that cannot be opened for lack
of descriptors raises `SandboxError(kind="host_limit")` that names the limit and how to raise it.
"""

from __future__ import annotations

import abc
import logging
import resource
from collections.abc import Mapping

from trialground.envs.tool_env import workspace_files
from trialground.errors import SandboxError, TrialgroundError
from trialground.sandbox.backends import BACKENDS
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import FDS_PER_SANDBOX
from trialground.tasks.model import Task

log = logging.getLogger(__name__)
FDS_BASE = 256  # the process's own: interpreter, event loop, logs, sockets, the fork server


def open_files_needed(sandboxes: int) -> int:
    return FDS_BASE + FDS_PER_SANDBOX * max(0, sandboxes)


def reserve_open_files(sandboxes: int, required: int | None = None) -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to fit `sandboxes` open sandboxes, as far as the hard limit
    allows (never lowering it); returns (soft limit now, descriptors needed) and warns when it does not fit
    `required` of them (default: all)."""
    need = open_files_needed(sandboxes)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if new > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    must = need if required is None else open_files_needed(required)
    if soft != resource.RLIM_INFINITY and soft < must:
        log.warning(
            "%d sandboxes at once need ~%d open files, but this process may open %d (RLIMIT_NOFILE hard "
            "limit): sandboxes beyond ~%d will fail; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=, "
            "docker --ulimit nofile=) or lower the pool's max_active/max_idle",
            sandboxes if required is None else required, must, soft,
            max(0, (soft - FDS_BASE) // FDS_PER_SANDBOX),
        )  # fmt: skip
    return soft, need


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

    def reserve(self, leased: int, idle: int) -> None:
        """Make room on the host for `leased` + `idle` sandboxes open at once (called by the pool when it
        starts and when it grows)."""
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
            return await open_sandbox(self.config, files)  # a host limit hit: SandboxError kind host_limit
        except TrialgroundError:
            raise
        except Exception as e:
            raise SandboxError(
                f"could not open a sandbox: {type(e).__name__}: {e}", kind="open_failed"
            ) from e

    def reserve(self, leased: int, idle: int) -> None:
        if BACKENDS.lookup(self.config.backend).capabilities.host_descriptors:
            reserve_open_files(leased + idle, required=leased)

    async def create(self, task: Task) -> Sandbox:
        return await self.open(workspace_files(task))
