"""Scale simulation: the real EnvPool scheduling code against simulated sandboxes, on virtual time.

    .venv/bin/python benchmarks/simulate_scale.py [--sizes 100,1000,10000] [--episodes-per-slot 100]

For each size S (max concurrent environments), S * 1.2 rollout workers pull episodes from a stream of
S * episodes-per-slot episodes (tasks drawn in GRPO groups of 8 samples, so warm sandboxes get reused
and new tasks force creation). An episode is acquire -> 1..8 turns of (generation, tool exec) -> release.
Latencies are lognormal (see `REALISTIC` in trialground/pool/sim.py, plus generation ~1 s); one exec in
10,000 kills its sandbox (an env error that the pool must recycle). Everything runs on a virtual clock
(`VirtualClockLoop`), so simulated hours take seconds and the CPU measured is the simulation's own.

Reported per size: slot utilisation (slot-seconds held by episodes / (S x makespan)), queue wait p50/p99
(virtual seconds), the pool's own CPU per acquire/release (`pool/sched_us_per_op`: thread CPU time inside
the pool's bookkeeping, each reading of that clock costing ~1 us itself), whole-process CPU per episode
(simulation included), and failures recycled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trialground.envs.config import EnvConfig
from trialground.pool import EnvPool, PoolConfig
from trialground.pool.sim import REALISTIC, LatencyModel, SimBackend, SimProfile, sim_env_factory
from trialground.pool.vclock import VirtualClockLoop
from trialground.tasks.model import Task, VerifierSpec

GROUP = 8
GENERATION = LatencyModel(1.0, 0.5)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def simulate(size: int, episodes: int, tasks_per_slot: float, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    profile = SimProfile(REALISTIC.create, REALISTIC.restore, REALISTIC.exec, fail_rate=1e-4)
    config = PoolConfig(
        max_active=size, max_queue=size * 10, acquire_timeout_s=1e9, lease_s=1e6, idle_ttl_s=600,
        max_idle=size * 4, max_uses=50, maintenance_interval_s=5.0,
    )  # fmt: skip
    backend = SimBackend(profile, seed)
    pool = EnvPool(
        config, env_config=EnvConfig(kind="tool"), backend=backend, env_factory=sim_env_factory,
        sched_clock=time.thread_time_ns,
    )  # fmt: skip
    # A task set smaller than the stream, visited in shuffled epochs, each task as a group of GROUP samples:
    # groups run concurrently (one sandbox each) and the task recurs later (its sandboxes are warm).
    n_tasks = max(1, int(size * tasks_per_slot))
    tasks = [
        Task(domain="sim", prompt=str(i), verifier=VerifierSpec(kind="exact", params={"answer": "-"}))
        for i in range(n_tasks)
    ]

    def episode_stream() -> Iterator[Task]:
        made = 0
        while True:
            order = list(range(n_tasks))
            rng.shuffle(order)
            for i in order:
                for _ in range(GROUP):
                    if made == episodes:
                        return
                    made += 1
                    yield tasks[i]

    stream = episode_stream()
    spans: list[tuple[float, float]] = []  # (start, end) of every episode's hold, virtual seconds
    errors = 0
    saturated_until = 0.0  # when the stream ran dry: the end of the saturated phase

    async def worker() -> None:
        nonlocal errors, saturated_until
        for task in stream:
            env = await pool.acquire(task)
            t0 = loop.time()
            await env.reset(task)
            for _ in range(rng.randint(1, 8)):
                await asyncio.sleep(GENERATION.sample(rng))  # the policy generates (env held, idle)
                obs = await env.step("run")
                if obs.done:
                    errors += 1
                    break
            spans.append((t0, loop.time()))
            await pool.release(env)
        saturated_until = saturated_until or loop.time()

    c0, w0 = cpu_s(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(int(size * 1.2))))
    makespan = loop.time()
    cpu, wall = cpu_s() - c0, time.perf_counter() - w0
    m = pool.metrics()
    await pool.close()
    window = saturated_until or makespan
    held = sum(max(0.0, min(b, window) - a) for a, b in spans)
    return {
        "size": size,
        "episodes": episodes,
        "utilisation": held / (size * window),
        "wait_p50_s": m["pool/wait_p50_s"],
        "wait_p99_s": m["pool/wait_p99_s"],
        "sched_us_per_op": m["pool/sched_us_per_op"],
        "cpu_us_per_episode": cpu / episodes * 1e6,
        "virtual_hours": makespan / 3600,
        "wall_s": wall,
        "created": m["pool/created"],
        "env_errors": errors,
        "recycled": m["pool/recycled"],
    }


def run(size: int, episodes: int, tasks_per_slot: float, seed: int) -> dict[str, float]:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(simulate(size, episodes, tasks_per_slot, seed))
    finally:
        loop.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000", help="max concurrent environments, comma-separated")
    ap.add_argument("--episodes-per-slot", type=int, default=100, help="episodes = size x this")
    ap.add_argument("--tasks-per-slot", type=float, default=0.5, help="distinct tasks = size x this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    cols = ["size", "episodes", "utilisation", "wait_p50_s", "wait_p99_s", "sched_us_per_op",
            "cpu_us_per_episode", "virtual_hours", "wall_s", "created", "env_errors", "recycled"]  # fmt: skip
    print(" ".join(f"{c:>18s}" for c in cols))
    for size in (int(s) for s in args.sizes.split(",")):
        row = run(size, size * args.episodes_per_slot, args.tasks_per_slot, args.seed)
        rows.append(row)
        print(
            " ".join(f"{row[c]:18.4f}" if isinstance(row[c], float) else f"{row[c]:18d}" for c in cols),
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
