"""Snapshot, restore and fork: byte-identical states, overlay and copying modes, flat restore cost."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from pathlib import Path

import pytest

from trialground.errors import SandboxError
from trialground.sandbox import mounts
from trialground.sandbox.backends.bwrap import teardown
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.mounts import overlay_works
from trialground.sandbox.workspace import BASE_DIR, own_prefix

MODES = ["overlay", "copy"]


def tree_cmd() -> str:
    return "find . -type f | sort | xargs -r sha256sum; find . | sort"


@pytest.mark.parametrize("mode", MODES)
async def test_restore_is_byte_identical(mode: str) -> None:
    cfg = SandboxConfig(snapshot_mode=mode)  # type: ignore[arg-type]
    async with await open_sandbox(cfg, {"a.txt": "A", "d/b.txt": "B"}) as sb:
        before = (await sb.exec(tree_cmd())).stdout
        sid = await sb.snapshot()
        await sb.exec(
            "echo changed > a.txt; rm -r d; mkdir -p new/deep; echo x > new/deep/x; chmod 600 a.txt"
        )
        await sb.write("host.txt", "h")
        assert (await sb.exec(tree_cmd())).stdout != before
        await sb.restore(sid)
        assert (await sb.exec(tree_cmd())).stdout == before
        await sb.exec("echo again > a.txt")  # restore twice from the same snapshot
        await sb.restore(sid)
        assert (await sb.exec(tree_cmd())).stdout == before


@pytest.mark.parametrize("mode", MODES)
async def test_nested_snapshots(mode: str) -> None:
    async with await open_sandbox(SandboxConfig(snapshot_mode=mode), {"v": "0"}) as sb:  # type: ignore[arg-type]
        s0 = await sb.snapshot()
        await sb.write("v", "1")
        s1 = await sb.snapshot()
        await sb.write("v", "2")
        await sb.restore(s1)
        assert await sb.read("v") == b"1"
        await sb.restore(s0)
        assert await sb.read("v") == b"0"
        await sb.restore(s1)
        assert await sb.read("v") == b"1"


@pytest.mark.parametrize("mode", MODES)
async def test_forks_start_identical_and_diverge(mode: str) -> None:
    async with await open_sandbox(SandboxConfig(snapshot_mode=mode), {"t.py": "print(1)\n"}) as sb:
        await sb.exec("echo state > s.txt")
        forks = [await sb.fork() for _ in range(3)]
        try:
            states = {(await f.exec(tree_cmd())).stdout for f in forks}
            assert states == {(await sb.exec(tree_cmd())).stdout}
            for i, f in enumerate(forks):
                await f.exec(f"echo {i} > s.txt")
            assert [await f.read("s.txt") for f in forks] == [b"0\n", b"1\n", b"2\n"]
            assert await sb.read("s.txt") == b"state\n"
        finally:
            await sb.close()  # the parent goes first: forks keep working on their own
            for f in forks:
                assert (await f.exec(["cat", "t.py"])).stdout == "print(1)\n"
                await f.close()


@pytest.mark.slow
@pytest.mark.skipif(not overlay_works(), reason="overlayfs cannot be mounted here")
async def test_restore_cost_is_flat_in_workspace_size() -> None:
    cfg = SandboxConfig(limits=Limits(disk_mb=256))
    times = {}
    for n in (10, 10_000):
        files = {f"d{i % 100}/f{i}.txt": f"{i}" for i in range(n)}
        async with await open_sandbox(cfg, files) as sb:
            sid = await sb.snapshot()
            await sb.exec("rm -rf d1 d2; echo x > d3/f3.txt")
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                await sb.restore(sid)
                best = min(best, time.perf_counter() - start)
            times[n] = best
            expected = ["3", str(sum(1 for i in range(n) if i % 100 == 1))]
            assert (await sb.exec("cat d3/f3.txt; echo; ls d1 | wc -l")).stdout.split() == expected
    # Flat, not fast: a copying restore of 10,000 files takes ~0.5 s, far past this bound even on an idle
    # machine; a busy one (other processes' CPU work) slows both sizes alike.
    assert times[10_000] < times[10] * 5 + 0.05, times


async def test_repeated_restores_do_not_fill_the_quota() -> None:
    async with await open_sandbox(SandboxConfig(limits=Limits(disk_mb=16))) as sb:
        sid = await sb.snapshot()
        for _ in range(6):  # 6 x 6 MiB written and discarded > 16 MiB quota
            r = await sb.exec("head -c 6M /dev/zero > big && echo ok")
            assert r.stdout == "ok\n", r
            await sb.restore(sid)
            await asyncio.sleep(0.05)  # the discarded layer is freed in the background


@pytest.mark.skipif(not overlay_works(), reason="overlayfs cannot be mounted here")
async def test_a_host_view_unmounted_from_outside_is_an_error_until_a_restore() -> None:
    """The overlay at a workspace's host path detached by someone else (as a root process's unshared mount
    namespace used to, through the shared mount it sits on): the host must not read the directory beneath
    it as an empty workspace, nor write there where the sandbox never looks; a restore mounts it again."""
    from trialground.verify.kinds.swe_tests import workspace_changes

    start = {"lib/a.py": "a = 1\n", "setup.py": "# s\n"}
    async with await open_sandbox(SandboxConfig(snapshot_mode="overlay"), start) as sb:
        sid = await sb.snapshot()
        assert (await sb.exec(["true"])).ok
        assert await workspace_changes(start, sb) == {}
        mounts.umount(sb.workspace.ws)  # type: ignore[attr-defined]  # our own mount, not another process's
        accesses = (
            sb.read("lib/a.py"),
            sb.write("lib/a.py", "a = 2\n"),
            workspace_changes(start, sb),
            sb.snapshot(),
        )
        for access in accesses:
            with pytest.raises(SandboxError) as caught:
                await access
            assert caught.value.kind == "workspace_lost", caught.value
        restarts = sb.restarts  # type: ignore[attr-defined]
        await sb.restore(sid)
        assert sb.restarts == restarts + 1  # type: ignore[attr-defined]  # a new sandbox binds it afresh
        assert (await sb.read("lib/a.py")).decode() == "a = 1\n"
        await sb.write("lib/a.py", "a = 3\n")
        assert (await sb.exec(["cat", "lib/a.py"])).stdout == "a = 3\n"
        assert await workspace_changes(start, sb) == {"lib/a.py": "a = 3\n"}


@pytest.mark.skipif(not overlay_works(), reason="overlayfs cannot be mounted here")
async def test_a_fork_whose_parent_layer_was_unbound_from_outside_refuses_to_restore() -> None:
    """A fork shares its parent's frozen layers through binds: one detached from outside would restore to
    a workspace without the parent's files, silently. The restore says so instead."""
    async with await open_sandbox(SandboxConfig(snapshot_mode="overlay"), {"p.txt": "parent"}) as sb:
        child = await sb.fork()
        try:
            sid = await child.snapshot()
            assert (await child.read("p.txt")) == b"parent"
            bound = child.workspace.layers[0]  # type: ignore[attr-defined]
            mounts.umount(bound)  # our own bind, as a foreign namespace's detach would leave it
            with pytest.raises(SandboxError) as caught:
                await child.restore(sid)
            assert caught.value.kind == "workspace_lost", caught.value
        finally:
            await child.close()


def own_mounts() -> list[str]:
    """Mount points of this process's workspaces: the host's mount table as a whole is shared with every
    other process (other test runs' sandboxes come and go in it)."""
    ours = f"{BASE_DIR}/{own_prefix()}"
    with open("/proc/self/mountinfo") as f:
        return sorted(line.split()[4] for line in f if line.split()[4].startswith(ours))


async def test_no_mounts_or_cgroups_leak() -> None:
    def mounts() -> list[str]:
        return own_mounts()

    async with await open_sandbox(SandboxConfig()) as sb:  # first use may set up the shared runtime view
        await sb.exec(["true"])
    await teardown.drain()
    before = mounts()
    for mode in MODES:
        async with await open_sandbox(SandboxConfig(snapshot_mode=mode), {"f": "x"}) as sb:  # type: ignore[arg-type]
            await sb.snapshot()
            child = await sb.fork()
            await child.close()
    await teardown.drain()  # closing finishes in the background
    assert mounts() == before


async def test_background_close_leaks_nothing() -> None:
    """Many fresh sandboxes opened, used and closed without waiting: once their teardowns are drained,
    no process, mount, cgroup or workspace of theirs is left, and no more than MAX_PENDING were pending."""
    from trialground.sandbox.backends.bwrap.cgroup import own_groups

    def state() -> tuple[list[str], int, int, int]:
        cgroups = len(own_groups())
        return (
            own_mounts(),
            sandbox_children(),
            cgroups,
            len(list(BASE_DIR.glob(f"{own_prefix()}*"))),
        )

    async with await open_sandbox(SandboxConfig(prewarm=0)) as sb:  # shared views are made once
        await sb.exec(["true"])
    await teardown.drain()
    before = state()
    most = 0
    for _ in range(3 * teardown.MAX_PENDING):
        async with await open_sandbox(SandboxConfig(prewarm=0), {"f": "x"}) as sb:
            assert (await sb.exec(["python3", "-I", "-S", "-c", "print(open('f').read())"])).stdout == "x\n"
        most = max(most, teardown.pending())
    assert most <= teardown.MAX_PENDING + 1
    await teardown.drain()
    assert teardown.pending() == 0
    assert state() == before


def sandbox_children() -> int:
    """Our child processes that are bubblewrap (zombies included: they must have been reaped)."""
    me, count = str(os.getpid()), 0
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        count += fields[1] == me and "(bwrap)" in stat
    return count


async def test_a_sandbox_dropped_without_close_is_freed_with_a_warning() -> None:
    """An environment that forgets `close()`: once nothing refers to its sandbox, its PID 1 and workspace
    mount are freed (with a ResourceWarning), not kept until the process exits."""
    async with await open_sandbox(SandboxConfig(prewarm=0)) as sb:  # shared views are made once
        await sb.exec(["true"])
    await teardown.drain()
    before = own_mounts()
    for launcher in ("forkserver", "bwrap"):
        sb = await open_sandbox(SandboxConfig(prewarm=0, launcher=launcher), {"f": "x"})
        assert (await sb.exec(["cat", "f"])).stdout == "x"
        root, pid1 = sb.workspace.root, sb._proc.pid  # type: ignore[attr-defined]
        with pytest.warns(ResourceWarning, match="never closed"):
            del sb
            gc.collect()
        assert not root.exists() and own_mounts() == before, launcher
        for _ in range(600):  # killed at once; the host's reaping of it may lag on a busy machine
            if not Path(f"/proc/{pid1}").exists() or _zombie(pid1):
                break
            await asyncio.sleep(0.05)
        assert not Path(f"/proc/{pid1}").exists() or _zombie(pid1), launcher


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True
