"""Spare sandboxes started ahead: used only once a config repeats, brand new, never leaked."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from trialground.sandbox.backends.bwrap import prewarm
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox

# a wall limit a machine at any load allows: what is asserted is what the commands print
CFG = SandboxConfig(prewarm=1, limits=Limits(wall_s=300, cpu_s=60))


def sandbox_processes() -> set[int]:
    """Pids of this process's bubblewrap children."""
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if (
                entry.isdigit()
                and Path(f"/proc/{entry}/stat").read_text().split()[3] == me
                and b"bwrap" in Path(f"/proc/{entry}/cmdline").read_bytes()
            ):
                found.add(int(entry))
        except OSError:
            continue
    return found


async def test_spares_are_fresh_and_only_made_for_repeated_configs() -> None:
    async with await open_sandbox(CFG, {"secret.txt": "first"}) as first:
        await first.exec("echo x > /workspace/left-behind; echo y > /tmp/y")
    pool = await prewarm._pool()
    assert not pool.ready.get(CFG)  # one open: no spare
    async with await open_sandbox(CFG) as second:
        await second.exec(["true"])
    for _ in range(100):
        if pool.ready.get(CFG):
            break
        await asyncio.sleep(0.05)
    spare = pool.ready[CFG][0]
    async with await open_sandbox(CFG, {"mine.txt": "3"}) as third:
        assert third is spare
        r = await third.exec("ls -A /workspace /tmp")
        assert r.ok, r
        assert r.stdout.split() == ["/tmp:", "/workspace:", "mine.txt"]


def test_pool_of_a_closed_loop_is_cleaned_up() -> None:
    async def use() -> None:
        for _ in range(2):
            async with await open_sandbox(CFG) as sb:
                await sb.exec(["true"])
        await asyncio.sleep(1.0)  # let the spare start

    before = sandbox_processes()  # an earlier test's sandbox may still be in its background teardown
    asyncio.run(use())
    assert sandbox_processes() - before == set()
