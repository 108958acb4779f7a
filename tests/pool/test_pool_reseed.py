"""Warm sandboxes change task (`PoolConfig.reseed`), with real sandboxes: the new task's workspace is
byte-identical to a fresh one, nothing of the previous episode survives (files, /tmp, processes), and the
pool counts it."""

from __future__ import annotations

import asyncio

from poolkit import NoGrader, make_task

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.pool import EnvPool, PoolConfig
from trialground.pool.sim import LatencyModel, SimBackend, SimProfile
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec

TOOL = EnvConfig(kind="tool")
LEFTOVERS = "ls -A /workspace /tmp /dev/shm; pgrep -c sleep || true"


def task_with_dirs(i: int) -> Task:
    return Task(
        domain="code",
        prompt=f"task {i}",
        files={"a.txt": f"content {i}\n", f"d{i}/deep/b.txt": "b\n"},
        verifier=VerifierSpec(kind="code_tests"),
    )


def bash(command: str) -> str:
    return format_tool_call("bash", {"command": command})


async def test_an_idle_sandbox_of_another_task_is_reseeded_clean() -> None:
    pool = EnvPool(
        PoolConfig(max_active=2), env_config=TOOL, sandbox_config=SandboxConfig(), grader=NoGrader()
    )
    first, second = task_with_dirs(1), task_with_dirs(2)
    fresh = ToolEnv(NoGrader(), TOOL, SandboxConfig())  # type: ignore[arg-type]
    want = (await fresh.reset(second)).start.workspace_digest  # type: ignore[union-attr]
    await fresh.close()

    env = await pool.acquire(first)
    assert isinstance(env, ToolEnv)
    await env.reset(first)
    dirty = "echo x > /tmp/t; echo y > /dev/shm/s; mkdir -p q/r; echo z > q/r/f; rm a.txt; (sleep 60 &)"
    await env.step(bash(dirty))
    sandbox = env.sandbox
    await pool.release(env)

    env2 = await pool.acquire(second)
    assert isinstance(env2, ToolEnv) and env2.sandbox is sandbox  # the warm one, not a new one
    obs = await env2.reset(second)
    assert obs.start.workspace_digest == want  # byte-identical to a fresh sandbox of this task
    out = await env2.step(bash(LEFTOVERS))
    assert "q" not in out.text.split() and "t" not in out.text.split() and "s" not in out.text.split()
    assert out.text.rstrip().endswith("0"), out.text  # no process of the last episode survived
    await pool.release(env2)
    m = pool.metrics()
    assert m["pool/created"] == 1 and m["pool/reused"] == 1 and m["pool/reseeded"] == 1
    assert m["pool/reseed_s"] > 0

    env3 = await pool.acquire(second)  # the same task again: a plain restore, no reseed
    assert isinstance(env3, ToolEnv) and env3.sandbox is sandbox
    assert (await env3.reset(second)).start.workspace_digest == want  # type: ignore[union-attr]
    await pool.release(env3)
    assert pool.metrics()["pool/reseeded"] == 1 and pool.metrics()["pool/reused"] == 2
    await pool.close()


async def test_reseed_off_makes_a_new_sandbox() -> None:
    pool = EnvPool(
        PoolConfig(max_active=2, reseed=False),
        env_config=TOOL,
        sandbox_config=SandboxConfig(),
        grader=NoGrader(),
    )
    async with pool.lease(make_task(1)):
        pass
    async with pool.lease(make_task(2)):
        pass
    m = pool.metrics()
    assert m["pool/created"] == 2 and m["pool/reused"] == 0
    await pool.close()


async def _queued(pool: EnvPool, task: Task) -> asyncio.Task:  # type: ignore[type-arg]
    waiter = asyncio.ensure_future(pool.acquire(task))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done() and pool.queue_depth > 0
    return waiter


async def test_a_sandbox_someone_waits_for_is_not_reseeded_for_another_task() -> None:
    """Capacity 1: B and then another A queue behind A's holder. When A's sandbox is parked, B (first in
    line) gets a new sandbox; the A waiter gets A's sandbox warm, with no reseed at all. Reseeding it for B
    would make the A waiter reseed yet another one back: under saturation with repeating tasks, every
    acquire would pay a reseed inside its capacity unit (benchmarks/pool.py, utilisation)."""
    pool = EnvPool(PoolConfig(max_active=1), env_config=TOOL, grader=NoGrader(), backend=SimBackend())
    a, b = make_task(1), make_task(2)
    env = await pool.acquire(a)
    sandbox_a = env.sandbox  # type: ignore[attr-defined]
    wait_b = await _queued(pool, b)
    wait_a = await _queued(pool, a)
    await pool.release(env)
    env_b = await wait_b
    assert env_b.sandbox is not sandbox_a  # type: ignore[attr-defined]
    await pool.release(env_b)
    env_a = await wait_a
    assert env_a.sandbox is sandbox_a  # type: ignore[attr-defined]
    await pool.release(env_a)
    m = pool.metrics()
    assert m["pool/reseeded"] == 0 and m["pool/created"] == 2 and m["pool/reused"] == 1
    await pool.close()


async def test_with_nobody_waiting_for_its_task_an_idle_sandbox_is_reseeded() -> None:
    pool = EnvPool(PoolConfig(max_active=1), env_config=TOOL, grader=NoGrader(), backend=SimBackend())
    a, b = make_task(1), make_task(2)
    env = await pool.acquire(a)
    sandbox_a = env.sandbox  # type: ignore[attr-defined]
    wait_b = await _queued(pool, b)
    await pool.release(env)
    env_b = await wait_b
    assert env_b.sandbox is sandbox_a  # type: ignore[attr-defined]
    await pool.release(env_b)
    m = pool.metrics()
    assert m["pool/reseeded"] == 1 and m["pool/created"] == 1
    await pool.close()


async def _in_turn(pool: EnvPool, tasks: list[Task]) -> None:
    for task in tasks:
        async with pool.lease(task):
            pass


async def test_auto_makes_new_sandboxes_while_reseeding_measures_slower() -> None:
    """`reseed: auto` (the default) on a backend whose commands are slow (each exec 0.2 s, creation
    instant, so a busy machine's scheduling delays cannot reverse the comparison): the first chance
    reseeds (nothing measured yet); after that every chance makes a new sandbox instead, except one in 32
    that reseeds to keep the estimate current."""
    slow_exec = SimProfile(exec=LatencyModel(0.2, 0.0))
    pool = EnvPool(
        PoolConfig(max_active=1), env_config=TOOL, grader=NoGrader(), backend=SimBackend(slow_exec)
    )
    await _in_turn(pool, [make_task(i) for i in range(2 + 64)])
    m = pool.metrics()
    assert m["pool/reseeded"] == 1 + 2, m  # the first chance, then the 32nd and the 64th
    assert m["pool/reseed_skipped"] == 62 and m["pool/created"] == 1 + 62
    assert m["pool/reseed_s"] >= 0.2 > m["pool/create_s"]
    await pool.close()


async def test_auto_reseeds_while_reseeding_measures_faster() -> None:
    slow_create = SimProfile(create=LatencyModel(0.2, 0.0))
    pool = EnvPool(
        PoolConfig(max_active=1), env_config=TOOL, grader=NoGrader(), backend=SimBackend(slow_create)
    )
    await _in_turn(pool, [make_task(i) for i in range(40)])
    m = pool.metrics()
    assert m["pool/created"] == 1 and m["pool/reseeded"] == 39 and m["pool/reseed_skipped"] == 0, m
    await pool.close()


async def test_reseed_true_reseeds_whatever_it_costs() -> None:
    slow_exec = SimProfile(exec=LatencyModel(0.02, 0.0))
    pool = EnvPool(
        PoolConfig(max_active=1, reseed=True),
        env_config=TOOL,
        grader=NoGrader(),
        backend=SimBackend(slow_exec),
    )
    await _in_turn(pool, [make_task(i) for i in range(10)])
    m = pool.metrics()
    assert m["pool/created"] == 1 and m["pool/reseeded"] == 9 and m["pool/reseed_skipped"] == 0, m
    await pool.close()


async def test_auto_keeps_reseeding_when_a_reseed_is_only_a_little_slower() -> None:
    """A reseed 1.125x a creation (0.45 against 0.4 s): within the margin, so no new sandbox is made. On a
    loaded CPU both queue alike, and a run without the margin made new sandboxes as the averages crossed."""
    close = SimProfile(create=LatencyModel(0.4, 0.0), exec=LatencyModel(0.45, 0.0))
    pool = EnvPool(PoolConfig(max_active=1), env_config=TOOL, grader=NoGrader(), backend=SimBackend(close))
    await _in_turn(pool, [make_task(i) for i in range(6)])
    m = pool.metrics()
    assert m["pool/created"] == 1 and m["pool/reseeded"] == 5 and m["pool/reseed_skipped"] == 0, m
    await pool.close()
