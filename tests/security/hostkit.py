"""Helpers for the host-side file access attacks: a sandboxed program that keeps swapping a workspace
directory for a symlink to a host directory, and the host directory it aims at."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from trialground.sandbox.base import ExecResult, Limits

SECRET = "HOST-SECRET-c0ffee"
INSIDE = "inside"

# Runs in the sandbox until the host writes `stop`: `d` is in turn the real directory (holding x =
# "inside"), absent, a symlink to the host directory, absent. Whatever the host's writes leave in the
# way is cleared and the cycle goes on; `ready` says the loop has started, `cycles` how often it went round.
SWAPPER = r"""
import os, shutil, sys
target = sys.argv[1]
def fresh():
    os.makedirs("real", exist_ok=True)
    with open("real/x", "w") as f:
        f.write("inside")
def clear():
    if os.path.islink("d"):
        os.unlink("d")
    elif os.path.isdir("d"):
        if os.path.exists("real"):
            shutil.rmtree("d", ignore_errors=True)
        else:
            os.rename("d", "real")
    elif os.path.exists("d"):
        os.unlink("d")
fresh()
open("ready", "w").close()
n = 0
while not os.path.exists("stop"):
    try:
        os.rename("real", "d")
        os.rename("d", "real")
        os.symlink(target, "d")
        os.unlink("d")
        n += 1
    except OSError:
        try:
            clear()
            fresh()
        except OSError:
            pass
with open("cycles", "w") as f:
    f.write(str(n))
"""

SWAP_LIMITS = Limits(wall_s=240, cpu_s=240, memory_mb=128, pids=16, disk_mb=16, output_bytes=64 * 1024)


def make_host_dir(root: Path) -> Path:
    """A host directory holding `x` = SECRET, the swapper's target; nothing else may appear in it."""
    host = root / "hostdir"
    host.mkdir()
    (host / "x").write_text(SECRET)
    return host


def assert_host_dir_untouched(host: Path) -> None:
    assert sorted(os.listdir(host)) == ["x"], sorted(os.listdir(host))
    assert (host / "x").read_text() == SECRET


@contextlib.asynccontextmanager
async def swapping(
    run: Callable[[], Awaitable[ExecResult]],
    ready: Callable[[], Awaitable[bool]],
    stop: Callable[[], Awaitable[None]],
) -> AsyncIterator[asyncio.Task[ExecResult]]:
    """While the body runs, the swapper runs in the sandbox (`run` starts it; `ready` polls its marker;
    `stop` writes the stop file). Yields the task of the swapper's exec; it must have ended well."""
    task = asyncio.ensure_future(run())
    try:
        for _ in range(2000):
            if task.done() or await ready():
                break
            await asyncio.sleep(0.01)
        assert not task.done(), task.result()
        yield task
    finally:
        await stop()
        result = await asyncio.wait_for(task, timeout=240)
    assert result.ok, result
