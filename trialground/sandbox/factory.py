"""`open_sandbox`: the one way to get a sandbox from a `SandboxConfig`, and `SyncSandbox` for sync code."""

from __future__ import annotations

import asyncio
import errno
import resource
import threading
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from trialground.errors import SandboxError, TrialgroundError
from trialground.sandbox.backends import BACKENDS
from trialground.sandbox.base import Command, ExecResult, Limits, Sandbox, SandboxConfig

T = TypeVar("T")


async def open_sandbox(
    config: SandboxConfig | None = None, files: Mapping[str, str | bytes] | None = None
) -> Sandbox:
    """A fresh sandbox of `config.backend` (`trialground.sandbox.backends`) with `files` written into its
    workspace.

    bwrap is the default; `process` (no isolation) and `remote` are used only when chosen. Raises
    SandboxError when the backend cannot be set up (for example bubblewrap missing), never falls back;
    kind `host_limit` when the process or host ran out of open files (`host_limit_error`).
    """
    config = config or SandboxConfig()
    cls = BACKENDS.lookup(config.backend).load("sandbox backend", SandboxError)
    try:
        sandbox: Sandbox = await cls.create(config, files)
    except (OSError, TrialgroundError) as e:
        cause = e if isinstance(e, OSError) else e.__cause__
        if isinstance(cause, OSError) and (clear := host_limit_error(cause)) is not None:
            raise clear from e
        raise
    return sandbox


FDS_PER_SANDBOX = 8  # measured 5.25 with the fork-server launcher and 4.2 with bubblewrap's, as root


def host_limit_error(e: OSError) -> SandboxError | None:
    """A clear error for a sandbox that could not be opened because a host limit on open files was hit."""
    if e.errno == errno.EMFILE:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return SandboxError(
            f"could not open a sandbox: this process has no file descriptor left (RLIMIT_NOFILE soft {soft}, "
            f"hard {hard}; each open sandbox holds up to {FDS_PER_SANDBOX}): raise the hard limit (ulimit "
            "-Hn, systemd LimitNOFILE=, docker --ulimit nofile=) or run fewer sandboxes at once",
            kind="host_limit",
        )
    if e.errno == errno.ENFILE:
        return SandboxError(
            "could not open a sandbox: the host's file table is full (sysctl fs.file-max): raise it or run "
            "fewer sandboxes at once",
            kind="host_limit",
        )
    return None


class _Loop:
    """One background event loop thread shared by every SyncSandbox of the process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, T]) -> T:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="trialground-sandbox", daemon=True).start()
                cls._loop = loop
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, cls._loop)
        return future.result()


class SyncSandbox:
    """A blocking facade over a `Sandbox`, for callers that are not async.

    `SyncSandbox(config, files)` opens a sandbox; methods mirror `Sandbox`; use as a context manager or
    call `close()`. Must not be used from inside a running event loop's thread (use the async API there).
    """

    def __init__(self, config: SandboxConfig | None = None, files: Mapping[str, str | bytes] | None = None,
                 *, _sandbox: Sandbox | None = None) -> None:  # fmt: skip
        self.sandbox = _sandbox or _Loop.run(open_sandbox(config, files))

    def exec(self, cmd: Command, *, stdin: bytes | str | None = None, env: Mapping[str, str] | None = None,
             cwd: str | None = None, limits: Limits | None = None) -> ExecResult:  # fmt: skip
        return _Loop.run(self.sandbox.exec(cmd, stdin=stdin, env=env, cwd=cwd, limits=limits))

    def write(self, path: str, data: bytes | str) -> None:
        _Loop.run(self.sandbox.write(path, data))

    def read(self, path: str, limit: int | None = None) -> bytes:
        return _Loop.run(self.sandbox.read(path, limit))

    def snapshot(self) -> str:
        return _Loop.run(self.sandbox.snapshot())

    def restore(self, snapshot_id: str) -> None:
        _Loop.run(self.sandbox.restore(snapshot_id))

    def fork(self) -> SyncSandbox:
        return SyncSandbox(_sandbox=_Loop.run(self.sandbox.fork()))

    def close(self) -> None:
        _Loop.run(self.sandbox.close())

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
