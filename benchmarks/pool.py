"""Environment pool benchmark: scheduling overhead, slot utilisation at saturation, warm vs cold acquire.

    .venv/bin/python benchmarks/pool.py [--quick] [--json out.json]

1. overhead: acquire+release of a tool environment backed by an *instant* simulated sandbox (restore,
   health check and exec cost nothing), so what is timed is the pool itself plus building the env;
   sequential (one caller) and contended (1,000 callers on 64 slots). Target: median <= 0.5 ms.
2. utilisation: 256 callers on 64 slots, each episode holding its env for ~3 simulated tool calls of
   ~20 ms (real sleeps). Utilisation = slot-seconds held by callers / (slots x wall time). Target >= 95%.
3. warm vs cold with real bwrap sandboxes: acquire of a task whose sandbox is warm (restore to the task
   snapshot + health check) against creating one from scratch (open + snapshot), with the sandbox layer's
   own spare-sandbox prewarming off and on.
4. mid-episode state control on a real sandbox with 50 files: env.snapshot(), env.rollback(), env.fork(4).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from trialground.envs.config import EnvConfig
from trialground.pool import EnvPool, PoolConfig
from trialground.pool.sim import INSTANT, LatencyModel, SimBackend, SimProfile
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec


class NoGrader:
    async def grade(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not graded in this benchmark")


def task(i: int) -> Task:
    return Task(
        domain="code", prompt=f"t{i}", files={"a.py": f"x = {i}\n"}, verifier=VerifierSpec(kind="code_tests")
    )


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def make_pool(backend: Any, **cfg: Any) -> EnvPool:
    config = PoolConfig(**{"max_idle": 100_000, "max_uses": 10**9, **cfg})
    return EnvPool(config, env_config=EnvConfig(kind="tool"), grader=NoGrader(), backend=backend)


async def overhead(n: int) -> dict[str, float]:
    pool = make_pool(SimBackend(INSTANT), max_active=64)
    tasks = [task(i) for i in range(64)]
    await pool.prewarm(tasks)  # one warm sandbox per task first: the steady state is warm acquires
    seq: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        env = await pool.acquire(tasks[i % 64])
        await pool.release(env)
        seq.append(time.perf_counter() - t0)

    per_op: list[float] = []

    async def caller(k: int) -> None:
        for j in range(n // 1000 + 1):
            t0 = time.perf_counter()
            env = await pool.acquire(tasks[(k + j) % 64])
            t1 = time.perf_counter()
            await asyncio.sleep(0)  # hand the loop to others while "holding"
            t2 = time.perf_counter()
            await pool.release(env)
            per_op.append((t1 - t0) + (time.perf_counter() - t2))

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(1000)))
    wall = time.perf_counter() - t0
    m = pool.metrics()
    await pool.close()
    return {
        "seq_median_ms": statistics.median(seq) * 1e3,
        "seq_p99_ms": pct(seq, 0.99) * 1e3,
        "contended_ops_per_s": len(per_op) / wall,
        "sched_us_per_op": m["pool/sched_us_per_op"],
    }


async def utilisation(seconds: float) -> dict[str, float]:
    slots, callers = 64, 256
    pool = make_pool(SimBackend(SimProfile(exec=LatencyModel(0.02, 0.3))), max_active=slots, max_queue=10_000)
    held = 0.0
    tasks = [task(i) for i in range(slots)]
    call = '<tool_call>{"name": "bash", "arguments": {"command": "true"}}</tool_call>'

    async def caller(k: int) -> None:
        nonlocal held
        i = k
        while time.perf_counter() < stop:
            env = await pool.acquire(tasks[i % slots])
            t0 = time.perf_counter()
            await env.reset(tasks[i % slots])
            for _ in range(3):
                await env.step(call)
            held += time.perf_counter() - t0
            await pool.release(env)
            i += 1

    # One warm sandbox per task before the clock starts. (Acquiring and releasing each task in turn would
    # not do: the pool would reseed the one idle sandbox from task to task, a simulated exec each time.)
    await pool.prewarm(tasks)
    t0 = time.perf_counter()
    stop = t0 + seconds
    await asyncio.gather(*(caller(k) for k in range(callers)))
    wall = time.perf_counter() - t0
    m = pool.metrics()
    await pool.close()
    return {
        "utilisation": held / (slots * wall),
        "episodes": m["pool/acquires"],
        "wait_p50_ms": m["pool/wait_p50_s"] * 1e3,
        "wait_p99_ms": m["pool/wait_p99_s"] * 1e3,
    }


async def warm_vs_cold(n: int, prewarm: int) -> dict[str, float]:
    from trialground.pool.backend import LocalBackend

    sandbox_config = SandboxConfig(prewarm=prewarm)
    pool = make_pool(LocalBackend(sandbox_config), max_active=4)
    cold: list[float] = []
    warm: list[float] = []
    for i in range(n):
        t = task(1000 + i)
        t0 = time.perf_counter()
        env = await pool.acquire(t)  # new task: created from scratch
        cold.append(time.perf_counter() - t0)
        await pool.release(env)
        await asyncio.sleep(0.3)  # quiet again: let the sandbox layer refill its spare, as between episodes
        t0 = time.perf_counter()
        env = await pool.acquire(t)  # same task again: warm, restored
        warm.append(time.perf_counter() - t0)
        await pool.release(env)
        await asyncio.sleep(0.3)
    m = pool.metrics()
    await pool.close()
    return {
        "cold_median_ms": statistics.median(cold) * 1e3,
        "warm_median_ms": statistics.median(warm) * 1e3,
        "speedup": statistics.median(cold) / statistics.median(warm),
        "restore_ms": m["pool/restore_s"] * 1e3,
    }


async def fork_rollback(n: int) -> dict[str, float]:
    from trialground.envs.tool_env import ToolEnv
    from trialground.envs.toolcalls import format_tool_call

    env = ToolEnv(NoGrader(), EnvConfig(kind="tool", max_turns=1000), SandboxConfig())
    await env.reset(task(0))
    files = "".join(f"printf '%0{1000}d' {i} > f{i}.txt; " for i in range(50))
    await env.step(format_tool_call("bash", {"command": files}))
    snap_s, roll_s, fork_s = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        snap = await env.snapshot()
        snap_s.append(time.perf_counter() - t0)
        await env.step(format_tool_call("write_file", {"path": f"f{i}.txt", "content": "changed"}))
        t0 = time.perf_counter()
        await env.rollback(snap)
        roll_s.append(time.perf_counter() - t0)
    for _ in range(max(2, n // 5)):
        t0 = time.perf_counter()
        branches = await env.fork(4)
        fork_s.append(time.perf_counter() - t0)
        for b in branches:
            await b.close()
    await env.close()
    return {
        "snapshot_ms": statistics.median(snap_s) * 1e3,
        "rollback_ms": statistics.median(roll_s) * 1e3,
        "fork4_ms": statistics.median(fork_s) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    n = 2000 if args.quick else 20000
    results: dict[str, dict[str, float]] = {}
    results["overhead"] = asyncio.run(overhead(n))
    results["utilisation"] = asyncio.run(utilisation(2.0 if args.quick else 10.0))
    for prewarm in (0, 1):
        results[f"warm_vs_cold_prewarm{prewarm}"] = asyncio.run(
            warm_vs_cold(5 if args.quick else 20, prewarm)
        )
    results["env_fork_rollback"] = asyncio.run(fork_rollback(5 if args.quick else 20))
    for name, vals in results.items():
        print(f"{name}:")
        for k, v in vals.items():
            print(f"  {k:24s} {v:12.4f}")
    ok = results["overhead"]["seq_median_ms"] <= 0.5 and results["utilisation"]["utilisation"] >= 0.95
    print("targets met" if ok else "TARGETS MISSED")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
