"""The fork-server launcher under load, cancellation and failure: concurrency, leaks, a dead or stalled
template, closed event loops, forked hosts."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from proc_scan import describe_fd, socket_kind

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import cgroup, forkserver, prewarm, teardown
from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox, bwrap_available
from trialground.sandbox.base import ExecResult, ExecStatus, Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import SyncSandbox, open_sandbox
from trialground.sandbox.workspace import BASE_DIR, own_prefix

pytestmark = pytest.mark.skipif(
    not bwrap_available() or not forkserver.available(), reason="needs bubblewrap and the fork server"
)
SMALL = Limits(wall_s=10, cpu_s=10, memory_mb=128, pids=32, disk_mb=32, output_bytes=64 * 1024)
CFG = SandboxConfig(limits=SMALL, prewarm=0)
T = TypeVar("T")


# -- what a process holds: descriptors, workspace mounts, cgroups, sandbox processes -----------------------
def _fds() -> set[int]:
    """This process's open descriptors except its live templates' own sockets: a template that dies is
    replaced (with a new socket), which is the fork server's state, not something a sandbox left."""
    templates = {
        t.sock.fileno() for key, t in forkserver._templates.items() if key[0] == os.getpid() and not t.dead()
    }
    listed = {int(fd) for fd in os.listdir("/proc/self/fd")} - templates
    # The listing's own descriptor is closed by now; of sockets, only the kind the launchers make counts.
    return {fd for fd in listed if describe_fd(fd) != "?" and socket_kind(fd) in ("", "unix seqpacket")}


def _workspace_mounts() -> list[str]:
    ours = f"{BASE_DIR}/{own_prefix()}"
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(ours)]


def _cgroups() -> list[Path]:
    return cgroup.own_groups()


def _parents() -> dict[int, int]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                found[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return found


def _sandbox_processes() -> set[int]:
    """Every live (non-zombie) descendant of this process's templates: intermediates, PID 1s, commands."""
    parents = _parents()
    roots = {t.proc.pid for key, t in forkserver._templates.items() if key[0] == os.getpid()}
    found: set[int] = set()
    for pid in parents:
        chain, seen = pid, 0
        while chain in parents and seen < 64:
            chain, seen = parents[chain], seen + 1
            if chain in roots:
                found.add(pid)
                break
    return {pid for pid in found if _state(pid) not in ("Z", "X", "")}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _held() -> tuple[set[int], list[str], list[Path], set[int]]:
    return _fds(), _workspace_mounts(), _cgroups(), _sandbox_processes()


async def _settle(before: tuple[set[int], list[str], list[Path], set[int]]) -> None:
    """Wait for background teardowns (up to 30 s: a loaded machine runs them late), then check that nothing
    more is held than `before`."""
    await teardown.drain()
    for _ in range(600):
        fds, ws, groups, procs = _held()
        if (
            fds <= before[0]
            and set(ws) <= set(before[1])
            and set(groups) <= set(before[2])
            and procs <= before[3]
        ):
            return
        await asyncio.sleep(0.05)
    fds, ws, groups, procs = _held()
    assert fds - before[0] == set(), {fd: f"{describe_fd(fd)} {socket_kind(fd)}" for fd in fds - before[0]}
    assert set(ws) - set(before[1]) == set()
    assert set(groups) - set(before[2]) == set()
    assert procs - before[3] == set()


def _template() -> forkserver.Template:
    """This process's template for CFG's runtime (other tests may have started others, for other runtimes)."""
    uid = 65534 if os.geteuid() == 0 else None
    return forkserver._templates[(os.getpid(), sys.base_prefix, uid)]


async def _warm_up() -> None:
    """Start this process's template (and its views), so that it is in every baseline."""
    async with await open_sandbox(CFG) as sb:
        assert (await sb.exec(["true"])).ok
    await teardown.drain()


async def _cycle(config: SandboxConfig, word: str) -> None:
    async with await open_sandbox(config) as sb:
        r = await sb.exec(["echo", word])
        assert r.stdout == f"{word}\n", r


@contextlib.contextmanager
def _stopped(template: forkserver.Template, for_s: float) -> Iterator[None]:
    """SIGSTOP the template; it continues after `for_s` seconds at the latest (and on leaving)."""
    pid = template.proc.pid
    os.kill(pid, signal.SIGSTOP)
    timer = threading.Timer(for_s, lambda: os.kill(pid, signal.SIGCONT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


# -- found by review, fixed ----------------------------------------------------------------------------------
async def test_a_host_with_more_than_1024_descriptors_can_open_sandboxes(many_descriptors: None) -> None:
    """A host holding more than 1024 descriptors opens sandboxes (pidfds are polled: select() refuses
    descriptors past 1023)."""
    sb = None
    try:
        sb = await open_sandbox(CFG)
        r = await sb.exec(["echo", "ok"])
        assert r.stdout == "ok\n", r
        assert isinstance(sb, BwrapSandbox) and sb.alive()
    finally:
        if sb is not None:
            await sb.close()
        await teardown.drain()


@pytest.mark.usefixtures("room_for_200_sandboxes")
async def test_a_stalled_template_does_not_block_the_event_loop() -> None:
    """A stalled template (its socket buffer full: ~170 requests in flight) never blocks the event loop:
    requests are sent without blocking and retried until it reads again. Shown by the order of events, not
    by a clock: the socket refuses a request (it is full), and afterwards this coroutine runs again while
    the template is still stopped; a blocking send would hold the loop until the template went on."""
    await _warm_up()
    template = _template()
    refused = 0
    real_send = template.send

    def counting_send(*args: Any) -> None:
        nonlocal refused
        try:
            real_send(*args)
        except BlockingIOError:
            refused += 1
            raise

    n = 200
    template.send = counting_send  # type: ignore[method-assign]
    try:
        with _stopped(template, for_s=120):  # continued on leaving, long before that on any machine
            tasks = [asyncio.create_task(open_sandbox(CFG)) for _ in range(n)]
            for _ in range(6000):  # each open makes its workspace first: slow on a busy machine
                await asyncio.sleep(0.01)
                if refused:
                    break
            await asyncio.sleep(0.01)
            still_stopped = _state(template.proc.pid) == "T"
        opened = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        del template.send
    try:
        assert refused > 0, "the stopped template's socket never filled up"
        assert still_stopped, "the loop ran again only after the template went on"
        assert all(isinstance(sb, BwrapSandbox) for sb in opened), {type(sb).__name__ for sb in opened}
    finally:
        await asyncio.gather(*(sb.close() for sb in opened if isinstance(sb, Sandbox)))
        await teardown.drain()


async def test_a_cancelled_open_returns_promptly_while_the_template_is_stalled() -> None:
    """A cancelled open returns at once even while the template is stalled: the start is not waited for
    (it cleans up after itself; a PID 1 made later finds its stdin closed and exits)."""
    await _warm_up()
    before = _held()
    template = _template()
    with _stopped(template, for_s=120):  # continued on leaving
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(open_sandbox(CFG), 0.3)
        # Returned while the template is still stopped: the cancelled open did not wait for it.
        assert _state(template.proc.pid) == "T"
    await _cycle(CFG, "after")
    await _settle(before)


async def test_requests_lost_with_a_dead_template_fail_with_a_reason() -> None:
    """Opens whose requests were queued when the template died are retried once with a new template, or
    fail with a reason that says so (never an empty message)."""
    await _warm_up()
    template = _template()
    with _stopped(template, for_s=5.0):
        tasks = [asyncio.create_task(open_sandbox(CFG)) for _ in range(4)]
        await asyncio.sleep(0.2)  # the requests are queued in the template's socket
        template.proc.kill()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    try:
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, SandboxError), repr(outcome)
                assert re.search(r"failed to start: \S", str(outcome)), f"no reason given: {outcome}"
            else:
                assert (await outcome.exec(["echo", "ok"])).stdout == "ok\n"
    finally:
        await asyncio.gather(*(sb.close() for sb in outcomes if isinstance(sb, Sandbox)))
    await _cycle(CFG, "after")


@pytest.mark.parametrize("delay", [0.0, 0.05])
async def test_closing_a_sandbox_while_its_command_runs(delay: float) -> None:
    """`close()` while an exec is in flight (the service's DELETE of a busy session, a caller's timeout):
    the exec ends with a "closed" SandboxError, the teardown reaps PID 1 after it, nothing is logged."""
    sb = await open_sandbox(CFG)
    if delay:  # a sandbox that said hello (else: one still starting)
        assert (await sb.exec(["true"])).ok
    running = asyncio.create_task(sb.exec("sleep 5; echo done"))
    await asyncio.sleep(delay)
    await sb.close()
    finishing = teardown._PENDING.get(sb)  # type: ignore[call-overload]
    outcome: ExecResult | BaseException
    try:
        outcome = await asyncio.wait_for(running, 10)
    except Exception as exc:
        outcome = exc
    failure = None
    if finishing is not None:
        failure = (await asyncio.gather(finishing, return_exceptions=True))[0]
    assert failure is None, f"the teardown failed: {failure!r}"
    if isinstance(outcome, BaseException):
        assert isinstance(outcome, SandboxError) and "failed to start" not in str(outcome), repr(outcome)
    else:
        assert outcome.status is ExecStatus.SANDBOX_ERROR, outcome


def test_a_forked_child_that_exits_leaves_the_parents_sandboxes_alone() -> None:
    """A forked copy of the host (a worker forked by the trainer, a library's fork without exec) that
    exits leaves the parent's sandboxes alone: it forgets the parent's pools, open sandboxes, pending
    teardowns and templates, so its exit hooks kill and delete nothing of the parent's."""
    script = textwrap.dedent(
        """
        import asyncio, os, sys
        from trialground.sandbox.base import Limits, SandboxConfig
        from trialground.sandbox.factory import open_sandbox

        async def main():
            sb = await open_sandbox(SandboxConfig(prewarm=0, limits=Limits(disk_mb=32)), {"f.txt": "data"})
            assert (await sb.exec(["cat", "f.txt"])).stdout == "data"
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # the child ends normally: its atexit hooks run
            os.waitpid(pid, 0)
            r = await sb.exec(["cat", "f.txt"])
            print("exec", r.status.value, r.stdout)
            try:
                print("read", (await sb.read("f.txt")).decode())
            except Exception as exc:
                print("read failed", repr(exc))
            await sb.close()

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["exec ok data", "read data"], done.stdout + done.stderr[-2000:]


def test_teardowns_left_by_a_closed_loop_are_finished() -> None:
    """Teardowns left pending by a loop closed without running them (`run_until_complete` then `close()`,
    a common sync wrapper) are finished at the next close: their mounts, cgroups and descriptors do not
    pile up until exit, and later closes do not wait behind them."""
    closed: list[BwrapSandbox] = []

    async def use() -> None:
        sb = await open_sandbox(CFG)
        assert (await sb.exec(["true"])).ok
        assert isinstance(sb, BwrapSandbox)
        closed.append(sb)
        await sb.close()

    try:
        for _ in range(3):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(use())
            finally:
                loop.close()
        asyncio.run(_cycle(CFG, "later"))  # a later loop of the same process
        left = [sb.workspace.root for sb in closed if sb.workspace.root.exists()]
        assert left == [], f"{len(left)} closed sandboxes still hold their workspace"
        assert not any(sb in teardown._PENDING for sb in closed)
    finally:
        for sb in closed:
            sb.close_now()
            teardown._PENDING.pop(sb, None)
        gc.collect()


def test_spares_of_a_closed_loop_close_their_descriptors() -> None:
    """The spares of a loop closed without `shutdown_asyncgens`, discarded by the next loop, release their
    pidfd and pipes at once (no 'unclosed transport' warnings, nothing held until garbage collection).

    Counted in a process of its own: in the suite's process, threads other tests leave running (clients,
    servers) open descriptors of their own while this counts."""
    script = textwrap.dedent(
        """
        import asyncio, gc, json, os, warnings
        from trialground.sandbox.backends.bwrap import prewarm
        from trialground.sandbox.base import Limits, SandboxConfig
        from trialground.sandbox.factory import open_sandbox
        from trialground.sandbox.backends.bwrap import teardown

        SMALL = Limits(wall_s=10, cpu_s=10, memory_mb=128, pids=32, disk_mb=32, output_bytes=64 * 1024)
        config = SandboxConfig(limits=SMALL, prewarm=1)

        async def cycle(cfg, word):
            async with await open_sandbox(cfg) as sb:
                r = await sb.exec(["echo", word])
                assert r.stdout == f"{word}\\n", r

        async def warm_up():
            await cycle(SandboxConfig(limits=SMALL, prewarm=0), "warm")
            await teardown.drain()

        async def use():
            for word in ("one", "two"):  # a repeated config: a spare is started
                await cycle(config, word)
            pool = await prewarm._pool()
            for _ in range(500):
                if pool.ready.get(config):
                    break
                await asyncio.sleep(0.01)
            assert pool.ready.get(config), "no spare was started"
            await teardown.drain()

        def fds():
            return set(os.listdir("/proc/self/fd"))

        asyncio.run(warm_up())
        gc.collect()
        gc.disable()  # what close_now frees, not what the collector finds later
        before = fds()
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(use())
        finally:
            loop.close()
        asyncio.run(cycle(config, "later"))  # discards the dead loop's pool
        left = {}
        for fd in sorted(fds() - before):
            try:
                left[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass  # the listing's own descriptor
        gc.enable()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        print(json.dumps(left))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}, done.stdout + done.stderr[-2000:]


# -- behaviour that holds (coverage the suite lacked) ---------------------------------------------------
async def test_many_sandboxes_at_once_and_in_a_row_leave_nothing_behind() -> None:
    await _warm_up()
    before = _held()
    await asyncio.gather(*(_cycle(CFG, f"w{i}") for i in range(30)))
    for i in range(100):
        await _cycle(CFG, f"s{i}")
    await _settle(before)


def test_threads_with_their_own_loops_and_the_sync_facade_at_once() -> None:
    asyncio.run(_warm_up())
    before_mounts, before_groups = _workspace_mounts(), _cgroups()
    errors: list[BaseException] = []

    def looped(k: int) -> None:
        async def main() -> None:
            config = SandboxConfig(limits=SMALL, prewarm=1)  # spares in every loop too
            for j in range(3):
                await asyncio.gather(*(_cycle(config, f"t{k}-{j}-{i}") for i in range(5)))

        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    def synced() -> None:
        try:
            for i in range(6):
                with SyncSandbox(CFG) as sb:
                    assert sb.exec(["echo", f"y{i}"]).stdout == f"y{i}\n"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=looped, args=(k,)) for k in range(3)] + [
        threading.Thread(target=synced)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        _workspace_mounts() != before_mounts or _cgroups() != before_groups
    ):
        time.sleep(0.05)  # the sync facade's loop finishes its teardowns in the background
    assert _workspace_mounts() == before_mounts and _cgroups() == before_groups


@pytest.mark.parametrize("prewarm_n", [0, 1])
async def test_cancelling_open_and_exec_at_every_step_leaks_nothing(prewarm_n: int) -> None:
    config = SandboxConfig(limits=SMALL, prewarm=prewarm_n)
    await _warm_up()
    before = _held()

    async def cancel_after(work: Awaitable[T], steps: int) -> T | None:
        task = asyncio.ensure_future(work)
        for _ in range(steps):
            if task.done():
                break
            await asyncio.sleep(0)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return None

    cancelled = 0
    for steps in range(0, 120, 3):
        sb = await cancel_after(open_sandbox(config), steps)
        if sb is None:
            cancelled += 1
            continue
        try:
            if await cancel_after(sb.exec(["echo", "x"]), steps) is None:
                cancelled += 1
            r = await sb.exec(["echo", "y"])  # a cancelled exec leaves a working sandbox
            assert r.stdout == "y\n", r
        finally:
            await sb.close()
    assert cancelled > 0
    await _cycle(config, "after")
    if prewarm_n:  # the spare now waiting in the pool is not a leak
        pool = await prewarm._pool()
        for task in list(pool.tasks):  # first the fills: one finishing later would pool a new spare
            task.cancel()
        await asyncio.gather(*pool.tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in pool.ready.pop(config, [])))
    await _settle(before)


@pytest.mark.slow  # ~5 s: a start that fails this way may wait its 5 s for the sandbox's stderr
async def test_a_template_killed_during_concurrent_opens_gives_sandbox_errors_only() -> None:
    await _warm_up()
    before_mounts, before_groups = _workspace_mounts(), _cgroups()

    async def one(i: int) -> ExecResult:
        sb = await open_sandbox(CFG)
        try:
            return await sb.exec(["echo", str(i)])
        finally:
            await sb.close()

    for delay in (0.0, 0.005, 0.02, 0.04):
        template = _template()
        tasks = [asyncio.create_task(one(i)) for i in range(12)]
        await asyncio.sleep(delay)
        template.proc.kill()
        started = time.monotonic()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        # At most the 5 s wait for a failed start's stderr (a lost report would wait 30 s), with room for
        # a busy machine.
        assert time.monotonic() - started < 25
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, SandboxError), repr(outcome)
            else:
                assert outcome.stdout == f"{i}\n" or outcome.status is ExecStatus.SANDBOX_ERROR, outcome
        await _cycle(CFG, "next")  # a new template
    await teardown.drain()
    assert _workspace_mounts() == before_mounts and _cgroups() == before_groups


async def test_a_template_stopped_for_a_moment_delays_opens_only() -> None:
    await _warm_up()
    with _stopped(_template(), for_s=0.5):
        opened = await asyncio.wait_for(asyncio.gather(*(open_sandbox(CFG) for _ in range(10))), 20)
    try:
        results = await asyncio.gather(*(sb.exec(["echo", "up"]) for sb in opened))
        assert all(r.stdout == "up\n" for r in results), results
    finally:
        await asyncio.gather(*(sb.close() for sb in opened))


async def test_snapshot_restore_and_fork_of_many_sandboxes_at_once() -> None:
    await _warm_up()
    before = _held()
    parents = await asyncio.gather(*(open_sandbox(CFG, {"p.txt": str(i)}) for i in range(8)))
    try:
        snaps = await asyncio.gather(*(p.snapshot() for p in parents))
        await asyncio.gather(*(p.exec("echo changed > p.txt; echo t > /tmp/t") for p in parents))
        children = await asyncio.gather(*(p.fork() for p in parents for _ in range(2)))
        try:
            seen = await asyncio.gather(*(c.exec(["cat", "p.txt"]) for c in children))
            assert [r.stdout for r in seen] == ["changed\n"] * 16
            await asyncio.gather(*(p.restore(s) for p, s in zip(parents, snaps, strict=True)))
            back = await asyncio.gather(*(p.exec("cat p.txt; ls /tmp") for p in parents))
            assert [r.stdout for r in back] == [str(i) for i in range(8)]
            again = await asyncio.gather(*(c.exec(["cat", "p.txt"]) for c in children))
            assert [r.stdout for r in again] == ["changed\n"] * 16  # forks are independent
        finally:
            await asyncio.gather(*(c.close() for c in children))
    finally:
        await asyncio.gather(*(p.close() for p in parents))
    await _settle(before)


@pytest.mark.skipif(os.geteuid() != 0, reason="networked sandboxes need root (netns.require)")
async def test_network_sandboxes_are_alike_under_both_launchers() -> None:
    script = "ls /etc; awk 'NR>2 {print $1}' /proc/net/dev | sort; hostname"
    seen: dict[tuple[str, bool], Any] = {}
    for launcher in ("forkserver", "bwrap"):
        for network in (True, False):
            config = SandboxConfig(limits=SMALL, prewarm=0, launcher=launcher, network=network)
            async with await open_sandbox(config) as sb:
                r = await sb.exec(script)
                assert r.ok, r
                seen[launcher, network] = r.stdout
    assert seen["forkserver", True] == seen["bwrap", True]
    assert seen["forkserver", False] == seen["bwrap", False]
    assert "resolv.conf" in seen["forkserver", True] and "resolv.conf" not in seen["forkserver", False]
    assert seen["forkserver", False].splitlines()[-2:] == ["lo:", "sandbox"]
