"""`open_sandbox`: the one way to get a sandbox from a `SandboxConfig`, and `SyncSandbox` for sync code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from trialground.errors import SandboxError
from trialground.sandbox.base import Command, ExecResult, Limits, Sandbox, SandboxConfig

T = TypeVar("T")


async def open_sandbox(
    config: SandboxConfig | None = None, files: Mapping[str, str | bytes] | None = None
) -> Sandbox:
    """A fresh sandbox of `config.backend` with `files` written into its workspace.

    bwrap is the default; `process` (no isolation) and `remote` are used only when chosen. Raises
    SandboxError when the backend cannot be set up (for example bubblewrap missing), never falls back.
    """
    config = config or SandboxConfig()
    if config.backend == "bwrap":
        from trialground.sandbox.bwrap import BwrapSandbox

        return await BwrapSandbox.create(config, files)
    if config.backend == "process":
        from trialground.sandbox.process import ProcessSandbox

        return await ProcessSandbox.create(config, files)
    if config.backend == "remote":
        from trialground.sandbox.remote import RemoteSandbox

        return await RemoteSandbox.create(config, files)
    raise SandboxError(f"unknown sandbox backend {config.backend!r}", kind="config")


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

    def read(self, path: str) -> bytes:
        return _Loop.run(self.sandbox.read(path))

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
