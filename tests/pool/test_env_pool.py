"""EnvPool lifecycle, capacity, queue, backpressure, timeouts, leases, reaping, metrics (simulated)."""

from __future__ import annotations

import asyncio

import pytest
from poolkit import NoGrader, make_task
from reward_helpers import error_of, reward_of

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.errors import EnvError, SandboxError
from trialground.pool import AcquireTimeout, EnvPool, PoolConfig, PoolFull
from trialground.pool.sim import LatencyModel, SimBackend, SimProfile, SimSandbox
from trialground.pool.vclock import run_virtual

TOOL = EnvConfig(kind="tool")


def make_pool(backend: SimBackend | None = None, **cfg: object) -> tuple[EnvPool, SimBackend]:
    backend = backend or SimBackend()
    config = PoolConfig(**{"max_active": 2, "maintenance_interval_s": 0.05, **cfg})  # type: ignore[arg-type]
    return EnvPool(config, env_config=TOOL, grader=NoGrader(), backend=backend), backend


async def test_acquire_release_reuses_warm_sandbox_restored(task) -> None:
    pool, backend = make_pool()
    env = await pool.acquire(task)
    assert isinstance(env, ToolEnv)
    await env.reset(task)
    assert env.sandbox is not None
    first = env.sandbox
    await first.write("junk.txt", "dirty")
    await pool.release(env)
    assert pool.metrics()["pool/idle"] == 1
    stale = await env.step('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    assert stale.done and error_of(stale).kind == "released"  # a stale reference cannot touch it
    env2 = await pool.acquire(task)
    assert isinstance(env2, ToolEnv) and env2.sandbox is first  # warm reuse
    assert isinstance(first, SimSandbox) and "junk.txt" not in first.files  # restored from the task snapshot
    assert first.files["a.txt"] == b"content 0\n"
    m = pool.metrics()
    assert m["pool/created"] == 1 and m["pool/acquires"] == 2 and m["pool/active"] == 1
    await pool.release(env2)
    await pool.release(env2)  # idempotent
    await pool.close()
    assert backend.live == 0


async def test_recycled_after_max_uses(task) -> None:
    pool, backend = make_pool(max_uses=2)
    for _ in range(5):
        async with pool.lease(task):
            pass
    m = pool.metrics()
    assert m["pool/created"] == 3 and m["pool/recycled"] == 2
    await pool.close()
    assert backend.live == 0


async def test_dead_sandbox_is_episode_error_and_slot_replaced(task) -> None:
    pool, backend = make_pool(max_active=2)
    env_a, env_b = await pool.acquire(task), await pool.acquire(task)
    assert isinstance(env_a, ToolEnv) and isinstance(env_b, ToolEnv)
    await env_a.reset(task)
    await env_b.reset(task)
    assert isinstance(env_a.sandbox, SimSandbox)
    env_a.sandbox.kill()
    obs = await env_a.step('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    assert obs.done and reward_of(obs) is None
    assert error_of(obs).kind == "dead" and error_of(obs).boundary == "sandbox"
    ok = await env_b.step('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    assert not ok.done and env_b.counters["tool_calls"] == 1  # the sibling goes on
    await pool.release(env_a)
    await pool.release(env_b)
    m = pool.metrics()
    assert m["pool/failures/dead"] == 1 and m["pool/recycled"] == 1 and m["pool/idle"] == 1
    env_c = await pool.acquire(task)  # capacity is back; a healthy sandbox serves it
    await pool.release(env_c)
    await pool.close()
    assert backend.live == 0


async def test_exception_inside_lease_recycles(task) -> None:
    pool, backend = make_pool()
    with pytest.raises(RuntimeError):
        async with pool.lease(task):
            raise RuntimeError("caller bug")
    m = pool.metrics()
    assert m["pool/active"] == 0 and m["pool/recycled"] == 1 and m["pool/failures/caller_error"] == 1
    await pool.close()
    assert backend.live == 0


async def test_concurrency_limit_fifo_queue(task) -> None:
    pool, _ = make_pool(max_active=1)
    first = await pool.acquire(task)
    order: list[int] = []

    async def waiter(i: int) -> None:
        env = await pool.acquire(task)
        order.append(i)
        await asyncio.sleep(0)
        await pool.release(env)

    tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
    await asyncio.sleep(0.01)
    assert pool.queue_depth == 3 and pool.active == 1
    await pool.release(first)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert pool.active == 0 and pool.queue_depth == 0
    await pool.close()


async def test_backpressure_full_queue_and_timeout(task) -> None:
    pool, _ = make_pool(max_active=1, max_queue=1)
    held = await pool.acquire(task)
    waiting = asyncio.create_task(pool.acquire(task, timeout=5))
    await asyncio.sleep(0.01)
    with pytest.raises(PoolFull) as full:
        await pool.acquire(task)
    assert full.value.info().kind == "pool_full" and full.value.info().boundary == "env"
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.queue_depth == 0
    with pytest.raises(AcquireTimeout):
        await pool.acquire(task, timeout=0.05)
    await pool.release(held)
    assert pool.active == 0  # neither the cancelled nor the timed-out waiter kept capacity
    m = pool.metrics()
    assert m["pool/failures/pool_full"] == 1 and m["pool/failures/acquire_timeout"] == 1
    env = await pool.acquire(task, timeout=1)
    await pool.release(env)
    await pool.close()


def test_lease_expiry_reclaims_and_revokes() -> None:
    async def main() -> None:
        pool, backend = make_pool(max_active=1, lease_s=30, maintenance_interval_s=1)
        task = make_task()
        env = await pool.acquire(task)
        await env.reset(task)
        waiter = asyncio.create_task(pool.acquire(task, timeout=120))
        await asyncio.sleep(31)  # virtual seconds
        assert pool.metrics()["pool/reclaimed"] == 1
        env2 = await waiter  # the reclaimed capacity went to the waiter
        obs = await env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
        assert obs.done and error_of(obs).kind == "lease_expired" and reward_of(obs) is None
        await pool.release(env)  # releasing a reclaimed env is a no-op
        assert pool.active == 1
        await pool.release(env2)
        await pool.close()
        assert backend.live == 0

    run_virtual(main())


def test_idle_reaping_keeps_min_warm() -> None:
    async def main() -> None:
        pool, backend = make_pool(max_active=4, idle_ttl_s=60, min_warm=1, maintenance_interval_s=5)
        envs = [await pool.acquire(make_task(i)) for i in range(4)]
        for env in envs:
            await pool.release(env)
        assert pool.idle == 4
        await asyncio.sleep(30)
        assert pool.idle == 4
        await asyncio.sleep(40)
        assert pool.idle == 1 and pool.metrics()["pool/reaped"] == 3
        await pool.close()
        assert backend.live == 0

    run_virtual(main())


async def test_max_idle_evicts_oldest() -> None:
    pool, backend = make_pool(max_active=4, max_idle=2)
    envs = [await pool.acquire(make_task(i)) for i in range(4)]
    for env in envs:
        await pool.release(env)
    assert pool.idle == 2
    await pool.close()
    assert backend.live == 0


async def test_restore_failure_falls_back_to_new_sandbox(task) -> None:
    pool, backend = make_pool()
    backend.keep_refs = True
    async with pool.lease(task):
        pass
    backend.created[0].kill()  # dies while idle: restore fails, a fresh one is made
    async with pool.lease(task) as env:
        assert isinstance(env, ToolEnv) and env.sandbox is backend.created[1]
    m = pool.metrics()
    assert m["pool/failures/dead"] == 1 and m["pool/created"] == 2
    await pool.close()
    assert backend.live == 0


async def test_create_failure_is_sandbox_error_and_frees_capacity(task) -> None:
    class Broken(SimBackend):
        async def create(self, task):  # type: ignore[no-untyped-def]
            raise SandboxError("no space", kind="disk")

    pool, _ = make_pool(Broken(), max_active=1, create_retries=1)
    with pytest.raises(SandboxError) as err:
        await pool.acquire(task)
    assert err.value.kind == "create_failed"
    assert pool.active == 0 and pool.metrics()["pool/failures/create"] == 2
    await pool.close()


async def test_set_max_active_admits_and_drains(task) -> None:
    pool, _ = make_pool(max_active=1)
    a = await pool.acquire(task)
    b_task = asyncio.create_task(pool.acquire(task))
    await asyncio.sleep(0.01)
    assert pool.queue_depth == 1
    pool.set_max_active(2)
    b = await asyncio.wait_for(b_task, 1)
    pool.set_max_active(1)
    c_task = asyncio.create_task(pool.acquire(task))
    await pool.release(a)  # over the limit: capacity is dropped, not handed on
    await asyncio.sleep(0.01)
    assert not c_task.done() and pool.active == 1
    await pool.release(b)
    c = await asyncio.wait_for(c_task, 1)
    await pool.release(c)
    await pool.close()


async def test_close_fails_waiters_and_closes_everything(task) -> None:
    pool, backend = make_pool(max_active=1)
    env = await pool.acquire(task)
    waiter = asyncio.create_task(pool.acquire(task))
    await asyncio.sleep(0.01)
    await pool.close()
    with pytest.raises(EnvError) as err:
        await waiter
    assert err.value.kind == "pool_closed"
    assert backend.live == 0
    obs = await env.step("anything")
    assert obs.done and error_of(obs).kind == "pool_closed"
    with pytest.raises(EnvError):
        await pool.acquire(task)


async def test_metrics_keys(task) -> None:
    pool, _ = make_pool(backend=SimBackend(SimProfile(exec=LatencyModel(0.001))))
    async with pool.lease(task) as env:
        await env.reset(task)
        await env.step('<tool_call>{"name": "bash", "arguments": {"command": "true"}}</tool_call>')
    m = pool.metrics()
    for key in (
        "pool/active", "pool/idle", "pool/queue_depth", "pool/wait_p50_s", "pool/wait_p99_s",
        "pool/create_s", "pool/restore_s", "pool/exec_s",
    ):  # fmt: skip
        assert key in m and isinstance(m[key], float)
    assert m["pool/exec_s"] > 0
    await pool.close()


async def test_single_turn_pool_needs_no_sandbox(task) -> None:
    backend = SimBackend()
    pool = EnvPool(
        PoolConfig(max_active=1), env_config=EnvConfig(kind="single_turn"), grader=NoGrader(), backend=backend
    )
    async with pool.lease(task) as env:
        obs = await env.reset(task)
        assert obs.text == task.prompt
    assert backend.live == 0 and pool.metrics()["pool/created"] == 0
    await pool.close()


async def test_prewarm_makes_warm_sandboxes() -> None:
    pool, backend = make_pool(max_active=2, max_idle=3)
    made = await pool.prewarm([make_task(i) for i in range(5)])
    assert made == 3 and pool.idle == 3 and backend.live == 3
    async with pool.lease(make_task(1)):
        pass
    assert pool.metrics()["pool/created"] == 3  # served warm
    await pool.close()
    assert backend.live == 0


@pytest.mark.parametrize(("mode", "restore_execs"), [("off", 0), ("alive", 0), ("exec", 1)])
async def test_health_check_modes(task, mode: str, restore_execs: int) -> None:
    pool, backend = make_pool(health_check=mode)
    backend.keep_refs = True
    async with pool.lease(task):
        pass
    box = backend.created[0]
    calls: list[object] = []
    original = box.exec

    async def exec_spy(cmd, **kw):  # type: ignore[no-untyped-def]
        calls.append(cmd)
        return await original(cmd, **kw)

    box.exec = exec_spy  # type: ignore[method-assign]
    async with pool.lease(task):
        pass
    assert len(calls) == restore_execs
    await pool.close()


async def test_fork_of_pooled_env_is_owned_by_caller(task) -> None:
    pool, backend = make_pool()
    env = await pool.acquire(task)
    assert isinstance(env, ToolEnv)
    await env.reset(task)
    branches = await env.fork(2)
    await pool.release(env)  # the parent's sandbox goes back warm; the branches live on
    for b in branches:
        obs = await b.step('<tool_call>{"name": "read_file", "arguments": {"path": "a.txt"}}</tool_call>')
        assert obs.text == "content 0\n"
    assert backend.live == 3
    for b in branches:
        await b.close()
    assert backend.live == 1
    await pool.close()
    assert backend.live == 0
