"""Ending a bubblewrap launcher's process: drain its pipes, wait for it, and keep a half-started one
from outliving a cancelled start. Used by `trialground.sandbox.backends.bwrap.sandbox`."""

from __future__ import annotations

import asyncio
import contextlib
import typing

from trialground.sandbox.backends.bwrap.forkserver import SandboxProcess
from trialground.sandbox.backends.bwrap.spawn import kill_group


async def drain(stream: asyncio.StreamReader | None) -> None:
    while stream is not None and await stream.read(1 << 16):
        pass


async def reap(proc: asyncio.subprocess.Process | SandboxProcess) -> None:
    """Wait for a killed bubblewrap and close its pipes. Its stdout/stderr are drained to their end: a pipe
    whose reader stopped reading (output past what we wanted) would otherwise never report EOF."""
    try:
        async with asyncio.timeout(10):
            await drain(proc.stdout)
            await drain(proc.stderr)
            await proc.wait()
    except TimeoutError:  # last resort: drop the pipes
        if isinstance(proc, SandboxProcess):
            proc.close_pipes()
        else:
            proc._transport.close()  # type: ignore[attr-defined]
        await proc.wait()
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed under us (close_now freed the rest)
                proc.stdin.close()


async def keep_if_cancelled(
    start: typing.Awaitable[asyncio.subprocess.Process],
) -> asyncio.subprocess.Process:
    """Await bubblewrap's start; when cancelled half-way the start still completes, so that the process is
    known and killed (a sandbox that was never handed back would outlive its sandbox object)."""
    task = asyncio.ensure_future(start)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            proc = await task
            kill_group(proc)
            await reap(proc)
        raise
