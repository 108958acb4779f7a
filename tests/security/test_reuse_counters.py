"""Counters of a sandbox's kernel state that no reset can set back: the next process id, the inode numbers
of /tmp and /dev/shm, SysV IPC ids, TIME_WAIT sockets. An occupant can set each to a value of its choosing
(fork, create files, create segments until it is reached) and the next occupant could read it: a channel
between episodes, and a way for one submission to count its own gradings. A hand-over to a new occupant
(`Sandbox.hand_over`: the pool's restore and reseed, a reused grading sandbox, an episode's reset) gives
new namespaces and scratch mounts, so the next occupant reads fresh values. Real sandboxes, both launchers."""

from __future__ import annotations

import asyncio
import json

import pytest
from reusekit import NoGrader
from reward_helpers import grade_and_score
from seckit import CONFIG

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.pool import EnvPool, PoolConfig
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import make_grader

LAUNCHERS = pytest.mark.parametrize("launcher", ["forkserver", "bwrap"])
LIMITS = Limits(wall_s=60, cpu_s=60, memory_mb=256, pids=64, disk_mb=16)
TARGET = 400

# Move every counter to at least T: the next pid, the next inode of /tmp and /dev/shm, the SysV shm index
# (ids cycle through 64 indexes; the sequence counts the cycles), and leave a TIME_WAIT socket on a port.
SET = r"""
import ctypes, os, socket, sys
T = int(sys.argv[1])
libc = ctypes.CDLL(None)
while True:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    if pid >= T:
        break
for top in ("/tmp", "/dev/shm"):
    while True:
        p = top + "/.x"
        open(p, "w").close()
        ino = os.stat(p).st_ino
        os.unlink(p)
        if ino >= T:
            break
while True:
    s = libc.shmget(0, 4096, 0o600)
    libc.shmctl(s, 0, None)
    if (s >> 15) * 64 + (s & 0x7FFF) >= T:
        break
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
client = socket.socket()
client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
client.bind(("127.0.0.1", 20000 + T % 1000))
client.connect(server.getsockname())
conn, _ = server.accept()
client.close()
conn.close()
server.close()
print("set")
"""
GET = r"""
import ctypes, json, os
libc = ctypes.CDLL(None)
ino = {}
for top in ("/tmp", "/dev/shm"):
    p = top + "/.probe"
    open(p, "w").close()
    ino[top] = os.stat(p).st_ino
    os.unlink(p)
s = libc.shmget(0, 4096, 0o600)
libc.shmctl(s, 0, None)
rows = open("/proc/net/tcp").readlines()[1:]
ports = sorted(int(r.split()[1].split(":")[1], 16) for r in rows if r.split()[3] == "06")
print(json.dumps({"pid": os.getpid(), "ino": ino, "shm": (s >> 15) * 64 + (s & 0x7FFF), "time_wait": ports}))
"""


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")


async def _set(sandbox: Sandbox) -> None:
    r = await sandbox.exec(["python3", "-c", SET, str(TARGET)], limits=LIMITS)
    assert r.ok and r.stdout == "set\n", r


async def _get(sandbox: Sandbox) -> dict:
    r = await sandbox.exec(["python3", "-c", GET], limits=LIMITS)
    assert r.ok, r
    return json.loads(r.stdout)


def _fresh(seen: dict) -> bool:
    small = TARGET // 4  # a fresh sandbox's first processes, inodes and ids are far below the target
    return (
        seen["pid"] < small
        and max(seen["ino"].values()) < small
        and seen["shm"] < small
        and (20000 + TARGET % 1000 not in seen["time_wait"])
    )


@LAUNCHERS
async def test_a_hand_over_gives_the_next_occupant_fresh_counters(launcher: str) -> None:
    sb = await open_sandbox(CONFIG.model_copy(update={"launcher": launcher, "limits": LIMITS}))
    try:
        snap = await sb.snapshot()
        await _set(sb)
        await sb.restore(snap)  # the same occupant rolling back: its counters are its own business
        assert not _fresh(await _get(sb))
        await _set(sb)
        await sb.hand_over(snap)
        seen = await _get(sb)
        assert _fresh(seen), seen
    finally:
        await sb.close()


def _task(i: int) -> Task:
    return Task(
        domain="code", prompt=f"task {i}", files={"a.txt": f"{i}\n"}, verifier=VerifierSpec(kind="code_tests")
    )


@LAUNCHERS
async def test_the_pools_next_episode_reads_fresh_counters_after_a_reseed_and_a_restore(
    launcher: str,
) -> None:
    pool = EnvPool(
        PoolConfig(max_active=1), env_config=EnvConfig(kind="tool"),
        sandbox_config=SandboxConfig(launcher=launcher, limits=LIMITS), grader=NoGrader(),
    )  # fmt: skip
    try:
        env = await pool.acquire(_task(1))
        await env.reset(_task(1))
        sb = env.sandbox
        await _set(sb)
        await pool.release(env)
        env = await pool.acquire(_task(2))  # another task: the same sandbox, reseeded
        await env.reset(_task(2))
        assert isinstance(env, ToolEnv) and env.sandbox is sb
        after_reseed = await _get(sb)
        await _set(sb)
        await pool.release(env)
        env = await pool.acquire(_task(2))  # the same task: restored
        await env.reset(_task(2))
        assert env.sandbox is sb
        after_restore = await _get(sb)
        await pool.release(env)
        assert _fresh(after_reseed), after_reseed
        assert _fresh(after_restore), after_restore
    finally:
        await pool.close()


# The sealed answer is 3, which the submission does not know: it guesses how many gradings of this
# sandbox came before it, read from /tmp's inode counter, and moves the counter on for the next one.
# Plain file operations, no fork: what any solution may do.
COUNTING_TASK = Task(
    domain="code",
    prompt="answer",
    hidden_checks={
        "test_hidden.py": "import solution\n\n\ndef test_answer():\n    assert solution.answer() == 3\n"
    },
    verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
)
COUNTING = """
import os
def _ino():
    p = "SCRATCH/.c%d" % os.getpid()
    open(p, "w").close()
    n = os.stat(p).st_ino
    os.unlink(p)
    return n
GUESS = _ino() // 100
while _ino() < (GUESS + 1) * 100 + 50:
    pass
def answer():
    return GUESS
"""


@LAUNCHERS
@pytest.mark.parametrize("scratch", ["/tmp", "/workspace"])
def test_a_submission_cannot_count_its_gradings_in_a_reused_grading_sandbox(
    launcher: str, scratch: str
) -> None:
    async def go() -> list[bool]:
        grading = GradingConfig(reuse_sandboxes=1, max_parallel=1, max_batch=1, share_identical=False)
        grader = make_grader(SandboxConfig(launcher=launcher), RewardConfig(grading=grading))
        try:
            return [
                (await grade_and_score(grader, COUNTING_TASK, COUNTING.replace("SCRATCH", scratch)))[0].passed
                for _ in range(5)
            ]
        finally:
            await grader.close()

    assert asyncio.run(go()) == [False] * 5


@pytest.mark.xfail(
    strict=True,
    reason="the members of one grading batch run one after another in one sandbox and share its counters "
    "(docs/architecture.md); max_batch: 1 closes it",
)
def test_a_submission_cannot_count_its_gradings_within_one_batch() -> None:
    async def go() -> list[bool]:
        grading = GradingConfig(reuse_sandboxes=1, max_parallel=1, max_batch=8, share_identical=False)
        grader = make_grader(SandboxConfig(), RewardConfig(grading=grading))
        try:
            verdicts = await grader.resource("code_tests").verifier.verify_many(
                [(COUNTING_TASK, COUNTING.replace("SCRATCH", "/tmp"))] * 5
            )
            return [v.passed for v in verdicts]  # type: ignore[union-attr]
        finally:
            await grader.close()

    assert asyncio.run(go()) == [False] * 5
