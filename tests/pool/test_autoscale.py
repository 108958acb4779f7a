"""Sizing by throughput: Little's-law target, bounds, hysteresis, saturation guard, the pool driving it."""

from __future__ import annotations

import asyncio

from poolkit import NoGrader, make_task

from trialground.envs.config import EnvConfig
from trialground.pool import Autoscaler, EnvPool, PoolConfig
from trialground.pool.sim import LatencyModel, SimBackend, SimProfile
from trialground.pool.vclock import run_virtual


def feed(a: Autoscaler, gen_s: float, env_s: float, conc: int, env_steps: int = 10) -> None:
    for _ in range(5):
        a.observe_generation(gen_s, conc)
    for _ in range(env_steps):
        a.observe_env(env_s)


def tick(a: Autoscaler, t: float, gen_s: float, env_s: float, conc: int) -> int | None:
    """Ten seconds of a closed system: each episode holds an env; step rate = size / (gen + env)."""
    a.observe_generation(gen_s, conc)
    for _ in range(max(1, round((a.current or 1) / (gen_s + env_s) * 10))):
        a.observe_env(env_s)
    return a.decide(t)


def test_target_follows_generation_vs_env_time() -> None:
    a = Autoscaler(1, 1000, headroom=1.0)
    assert a.decide(0.0) is None  # no data yet
    feed(a, gen_s=1.0, env_s=1.0, conc=8)
    assert a.decide(10.0) == 16  # half the time in the env: twice the generator's concurrency
    for t in range(2, 15):  # the environment gets slower: the EWMA follows, the size doubles
        tick(a, 10.0 * t, gen_s=1.0, env_s=3.0, conc=8)
    assert a.current == 32 and a.ceiling == 1000


def test_bounds_and_hysteresis() -> None:
    a = Autoscaler(4, 20, headroom=1.0)
    feed(a, gen_s=1.0, env_s=100.0, conc=8)
    assert a.decide(1.0) == 20
    b = Autoscaler(4, 100, headroom=1.0, hysteresis=0.1)
    feed(b, gen_s=1.0, env_s=1.0, conc=10)
    assert b.decide(1.0) == 20
    b.observe_env(1.3)  # target moves by < 10%: keep the current size
    assert b.decide(2.0) is None


def test_saturated_environment_caps_growth() -> None:
    a = Autoscaler(1, 1000, headroom=1.0, reprobe_every=1000)
    feed(a, gen_s=1.0, env_s=1.0, conc=10, env_steps=100)
    assert a.decide(1.0) == 20
    # the env step rate stays flat while step time grows: more environments bought nothing
    for t in range(2, 8):
        a.observe_generation(1.0, 10)
        for _ in range(100):
            a.observe_env(1.0 * t)
        a.decide(float(t))
    assert a.ceiling <= 40 and (a.current or 0) <= 40


def test_pool_applies_autoscaler_decisions() -> None:
    async def main() -> None:
        config = PoolConfig(
            max_active=2, autoscale=True, min_active=2, max_active_bound=64, autoscale_interval_s=1.0,
            maintenance_interval_s=0.5, acquire_timeout_s=1e6,
        )  # fmt: skip
        backend = SimBackend(SimProfile(exec=LatencyModel(0.5, 0.1)))
        pool = EnvPool(config, env_config=EnvConfig(kind="tool"), grader=NoGrader(), backend=backend)
        call = '<tool_call>{"name": "bash", "arguments": {"command": "x"}}</tool_call>'

        async def rollout(i: int) -> None:
            task = make_task(i % 4)
            async with pool.lease(task) as env:
                await env.reset(task)
                for _ in range(3):
                    await asyncio.sleep(0.5)  # generation
                    pool.observe_generation(0.5, 8)
                    await env.step(call)

        await asyncio.gather(*(rollout(i) for i in range(200)))
        assert pool.max_active == 18  # 8 sequences x (0.5 s gen + ~0.5 s env) / 0.5 s gen x 1.1 headroom
        assert pool.metrics()["pool/max_active"] == pool.max_active
        await pool.close()
        assert backend.live == 0

    run_virtual(main())
