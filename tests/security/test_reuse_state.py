"""Reuse restores everything: a sandbox handed to its next occupant (a restore, a reseed of the
environment pool, a reused grading sandbox) holds nothing of the previous one: no SysV shared memory,
message queue or semaphore, no POSIX message queue, no file in /tmp or /dev/shm, no process, no mount,
no memory charged. Proved with inventories taken before and after, under both launchers."""

from __future__ import annotations

import asyncio

import pytest
from reusekit import NoGrader, inventory, leftovers, plant, shm_hog, spawned
from seckit import CONFIG, unenforced

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.pool import EnvPool, PoolConfig
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.code_tests import CodeTestsVerifier

LAUNCHERS = pytest.mark.parametrize("launcher", ["forkserver", "bwrap"])


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")


async def test_restore_returns_the_sandbox_to_its_snapshot_in_every_resource(sandbox: Sandbox) -> None:
    snap = await sandbox.snapshot()
    before = await inventory(sandbox)
    assert before["mqueue"] == [] and before["shm"] == [] and before["processes"] == []
    await plant(sandbox)
    dirty = await inventory(sandbox)
    assert dirty["shm"] and dirty["msg"] and dirty["sem"] and dirty["mqueue"] and dirty["processes"] == []
    await sandbox.restore(snap)
    assert await inventory(sandbox) == before
    assert await leftovers(sandbox) == ""
    # The supervisor's reset removed it all and proved it: the sandbox was not started afresh for it.
    assert sandbox.restarts == 0  # type: ignore[attr-defined]


async def test_every_restore_is_a_clean_one(sandbox: Sandbox) -> None:
    snap = await sandbox.snapshot()
    before = await inventory(sandbox)
    for _ in range(3):
        await plant(sandbox)
        await sandbox.restore(snap)
        assert await leftovers(sandbox) == ""
    assert await inventory(sandbox) == before


TOOL = EnvConfig(kind="tool")


def _task(i: int) -> Task:
    return Task(
        domain="code",
        prompt=f"task {i}",
        files={"a.txt": f"same {i}\n"},
        verifier=VerifierSpec(kind="code_tests"),
    )


def _bash(command: str) -> str:
    return format_tool_call("bash", {"command": command})


@LAUNCHERS
async def test_a_reseeded_sandbox_shows_the_next_task_nothing_of_the_last(launcher: str) -> None:
    config = SandboxConfig(launcher=launcher)  # type: ignore[arg-type]
    pool = EnvPool(PoolConfig(max_active=1), env_config=TOOL, sandbox_config=config, grader=NoGrader())
    try:
        env = await pool.acquire(_task(1))
        assert isinstance(env, ToolEnv)
        await env.reset(_task(1))
        sandbox = env.sandbox
        await plant(sandbox)
        await pool.release(env)
        env2 = await pool.acquire(_task(2))  # another task: the same sandbox, reseeded
        assert isinstance(env2, ToolEnv) and env2.sandbox is sandbox
        await env2.reset(_task(2))
        assert await leftovers(env2.sandbox) == ""
        await pool.release(env2)
        env3 = await pool.acquire(_task(2))  # the same task again: restored
        assert isinstance(env3, ToolEnv) and env3.sandbox is sandbox
        await env3.reset(_task(2))
        await plant(sandbox)
        await pool.release(env3)
        env4 = await pool.acquire(_task(2))
        await env4.reset(_task(2))
        assert isinstance(env4, ToolEnv) and await leftovers(env4.sandbox) == ""
        await pool.release(env4)
        assert pool.metrics()["pool/reseeded"] == 1
    finally:
        await pool.close()


@LAUNCHERS
async def test_memory_left_charged_by_one_occupant_is_the_next_ones_again(launcher: str) -> None:
    limits = Limits(wall_s=30, cpu_s=30, memory_mb=320, pids=32, disk_mb=16)
    sb = await open_sandbox(SandboxConfig(launcher=launcher, limits=limits))  # type: ignore[arg-type]
    try:
        snap = await sb.snapshot()
        hog = await sb.exec(["python3", "-c", shm_hog(240)])
        assert hog.ok, hog
        await sb.restore(snap)
        # An honest command that needs the memory its limit gives it.
        honest = await sb.exec(["python3", "-c", "b = bytearray(240 << 20)\nprint(len(b) >> 20)"])
        assert honest.ok and honest.stdout.strip() == "240", honest
        idle = await sb.exec(["true"])
        if not unenforced(sb, "memory"):
            assert idle.peak_memory_mb < 200, idle  # nothing of the 240 MiB is charged any more
    finally:
        await sb.close()


CHECK = "import solution\n\ndef test_add():\n    assert solution.add(2, 3) == 5\n"
ADD = Task(
    domain="code",
    prompt="add",
    hidden_checks={"test_hidden.py": CHECK},
    verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
)
# Correct, and needs 100 MiB of the 512 its limit gives it.
GOOD = "def add(a, b):\n    work = bytearray(100 << 20)\n    return a + b + work[0]\n"
# Wrong, and leaves 460 MiB of shared memory charged to the sandbox behind it (made by a process of its
# own, out of the worker's audit hook's sight).
HOG = spawned(shm_hog(460)) + "def add(a, b):\n    return a - b\n"


# Wrong, and tries to narrow what every other process of its sandbox passes on (PID 1 forks every later
# command; the batch's runner forks every later member): a small address space, a low priority, one CPU.
LIMITER = (
    "import os, resource\n"
    "for _p in [int(n) for n in os.listdir('/proc') if n.isdigit() and int(n) != os.getpid()]:\n"
    "    for _call in (lambda: resource.prlimit(_p, resource.RLIMIT_AS, (80 << 20, 80 << 20)),\n"
    "                  lambda: resource.prlimit(_p, resource.RLIMIT_NOFILE, (12, 12)),\n"
    "                  lambda: os.setpriority(os.PRIO_PROCESS, _p, 19),\n"
    "                  lambda: os.sched_setaffinity(_p, {0})):\n"
    "        try:\n            _call()\n        except OSError:\n            pass\n"
    "def add(a, b):\n    return a - b\n"
)


@LAUNCHERS
@pytest.mark.parametrize("batch", [1, 8], ids=["single", "batched"])
@pytest.mark.parametrize("attack", ["hog", "limiter"])
async def test_a_wrong_submission_cannot_fail_the_correct_ones_after_it(
    launcher: str, batch: int, attack: str
) -> None:
    wrong = HOG if attack == "hog" else LIMITER
    config = CONFIG.model_copy(update={"launcher": launcher, "limits": Limits()})
    grading = GradingConfig(reuse_sandboxes=1, max_parallel=1, max_batch=batch)
    verifier = CodeTestsVerifier(config, grading)
    try:
        for _ in range(2):
            if batch == 1:
                bad = await verifier.verify(ADD, wrong)
                goods = [await verifier.verify(ADD, GOOD) for _ in range(3)]
            else:
                bad, *goods = await verifier.verify_many([(ADD, wrong)] + [(ADD, GOOD)] * 3)
                goods += [await verifier.verify(ADD, GOOD)]
            assert not bad.passed and bad.error is None  # type: ignore[union-attr]
            assert all(v.passed for v in goods), [(v.detail, v.tests) for v in goods]  # type: ignore[union-attr]
    finally:
        await verifier.close()


@LAUNCHERS
async def test_pid1s_cpus_narrowed_by_an_occupant_are_the_next_ones_again(launcher: str) -> None:
    """CPU affinity is the one setting of PID 1 a command may change (seccomp refuses the others): the
    restore's inventory sees it, and the next occupant gets a new sandbox with every CPU."""
    import os

    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("one CPU: there is nothing to narrow")
    sandbox = await open_sandbox(CONFIG.model_copy(update={"launcher": launcher}))
    try:
        snap = await sandbox.snapshot()
        show = ["python3", "-c", "import os; print(sorted(os.sched_getaffinity(1)))"]
        before = (await sandbox.exec(show)).stdout
        narrow = await sandbox.exec(["python3", "-c", f"import os; os.sched_setaffinity(1, {{{min(cpus)}}})"])
        assert narrow.ok, narrow
        await sandbox.restore(snap)
        assert sandbox.restarts == 1  # type: ignore[attr-defined]
        assert (await sandbox.exec(show)).stdout == before
    finally:
        await sandbox.close()


@LAUNCHERS
async def test_a_sandbox_whose_pid1_died_between_occupants_starts_afresh_at_the_restore(
    launcher: str,
) -> None:
    import os
    import signal

    sandbox = await open_sandbox(CONFIG.model_copy(update={"launcher": launcher}))
    try:
        snap = await sandbox.snapshot()
        assert (await sandbox.exec(["true"])).ok
        os.kill(sandbox._proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]  # from outside: the OOM killer
        for _ in range(400):
            if not sandbox.alive():  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.05)
        assert not sandbox.alive()  # type: ignore[attr-defined]
        await sandbox.restore(snap)
        after = await sandbox.exec(["echo", "next occupant"])
        assert after.ok and after.stdout == "next occupant\n", after
    finally:
        await sandbox.close()


@LAUNCHERS
async def test_every_later_restore_reaches_a_fork_and_a_sandbox_started_afresh(launcher: str) -> None:
    """A sandbox started while an overlay was mounted at /workspace (a fork; one started afresh after an
    unclean restore) binds that overlay: later snapshots and restores must still reach what it runs."""
    import os

    parent = await open_sandbox(CONFIG.model_copy(update={"launcher": launcher}), {"a.txt": "parent\n"})
    try:
        child = await parent.fork()
        try:
            snap = await child.snapshot()
            for i in range(3):
                await child.restore(snap)
                await child.write("solution.py", f"x = {i}\n")
                seen = await child.exec(["cat", "solution.py", "a.txt"])
                assert seen.stdout == f"x = {i}\nparent\n", seen
        finally:
            await child.close()
        if len(os.sched_getaffinity(0)) > 1:  # an unclean restore (see above) starts it afresh
            snap = await parent.snapshot()
            assert (await parent.exec(["python3", "-c", "import os; os.sched_setaffinity(1, {0})"])).ok
            for i in range(3):
                await parent.restore(snap)
                await parent.write("solution.py", f"y = {i}\n")
                seen = await parent.exec(["cat", "solution.py"])
                assert seen.stdout == f"y = {i}\n", seen
            assert parent.restarts == 1  # type: ignore[attr-defined]
    finally:
        await parent.close()


# The namespaces' sysctls an occupant could try to leave set: 64 bits in one file, or a next occupant
# with no SysV queue, segment or semaphore set, no POSIX queue, a lower pid ceiling.
SYSCTLS = {
    "/proc/sys/kernel/shmmax": "81985529216486895",
    "/proc/sys/kernel/msgmni": "0",
    "/proc/sys/kernel/shmmni": "0",
    "/proc/sys/kernel/sem": "250\t32000\t32\t0",
    "/proc/sys/fs/mqueue/queues_max": "0",
    "/proc/sys/kernel/pid_max": "4321",
}
_SYSCTL_READ = (
    "import json, sys\nprint(json.dumps({p: open(p).read().strip() for p in json.loads(sys.argv[1])}))\n"
)
_SYSCTL_PROBE = (
    "import json, sys\nout = {}\nfor p, v in json.loads(sys.argv[1]).items():\n"
    "    try:\n        open(p, 'w').write(v)\n        out[p] = 'written'\n"
    "    except OSError as e:\n        out[p] = open(p).read().strip()\nprint(json.dumps(out))\n"
)


@LAUNCHERS
async def test_an_occupant_cannot_set_its_namespaces_sysctls_for_the_next(launcher: str) -> None:
    import json

    sb = await open_sandbox(CONFIG.model_copy(update={"launcher": launcher}))
    try:
        snap = await sb.snapshot()
        before = json.loads((await sb.exec(["python3", "-c", _SYSCTL_READ, json.dumps(SYSCTLS)])).stdout)
        tried = json.loads((await sb.exec(["python3", "-c", _SYSCTL_PROBE, json.dumps(SYSCTLS)])).stdout)
        assert "written" not in tried.values(), tried
        await sb.restore(snap)
        after = json.loads((await sb.exec(["python3", "-c", _SYSCTL_READ, json.dumps(SYSCTLS)])).stdout)
        assert after == before
    finally:
        await sb.close()
