"""Sandbox benchmarks, measured side by side in one run (interleaved, so machine load hits all alike).

    .venv/bin/python benchmarks/sandbox.py [--iterations 30] [--seconds 10] [--json out.json]

- bare:  `python3 -I -S -c pass` spawned on the host (the sandbox's own interpreter, no sandbox)
- cold:  the same command in a brand-new sandbox: open + exec + close, and the exec alone; without
         spares (prewarm=0) from each launcher (the fork server, the default, and one bubblewrap per
         sandbox), also with the command really exec'd (python_fast=False, no pre-started interpreter),
         and with one spare started ahead in the background (prewarm=1)
- warm:  the same command in an already-open sandbox (forked from the pre-started interpreter)
- restore: `restore(snapshot)` after changes, for workspaces of 10, 1,000 and 10,000 files
- throughput: fresh-sandbox runs/s and warm execs/s with 2 concurrent workers
Prints a markdown table with ratios to bare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from trialground.sandbox.backends.bwrap import prewarm
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox

PY = f"{sys.base_prefix}/bin/python3"
CMD = [PY, "-I", "-S", "-c", "pass"]


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def spare_ready(cfg: SandboxConfig, timeout: float = 5.0) -> None:
    pool = await prewarm._pool()
    deadline = time.monotonic() + timeout
    while not pool.ready.get(cfg) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


COLD = {
    "cold_total": SandboxConfig(prewarm=0),
    "cold_bwrap_total": SandboxConfig(prewarm=0, launcher="bwrap"),
    "cold_exec_real_total": SandboxConfig(prewarm=0, python_fast=False),
    "cold_bwrap_exec_real_total": SandboxConfig(prewarm=0, launcher="bwrap", python_fast=False),
}


async def latency(iterations: int) -> dict[str, list[float]]:
    pooled_cfg = SandboxConfig(prewarm=1)
    keys = ("bare", "cold_exec", "cold_bwrap_exec", *COLD, "pooled_total", "warm")
    out: dict[str, list[float]] = {k: [] for k in keys}
    async with await open_sandbox(SandboxConfig(prewarm=0)) as warm:
        for _ in range(3):
            await warm.exec(CMD)
        for _ in range(iterations):
            t = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(*CMD)
            assert await proc.wait() == 0
            out["bare"].append(time.perf_counter() - t)
            for key, cfg in COLD.items():
                t = time.perf_counter()
                sb = await open_sandbox(cfg)
                t_exec = time.perf_counter()
                r = await sb.exec(CMD)
                if key in ("cold_total", "cold_bwrap_total"):
                    out[key.replace("_total", "_exec")].append(time.perf_counter() - t_exec)
                await sb.close()
                out[key].append(time.perf_counter() - t)
                assert r.ok, r
            t = time.perf_counter()
            async with await open_sandbox(pooled_cfg) as sb:
                assert (await sb.exec(CMD)).ok
            out["pooled_total"].append(time.perf_counter() - t)
            await spare_ready(pooled_cfg)  # keep the spare's start out of the other measurements
            t = time.perf_counter()
            r = await warm.exec(CMD)
            out["warm"].append(time.perf_counter() - t)
            assert r.ok, r
    return out


async def restore_times(sizes: tuple[int, ...], repeats: int) -> dict[int, tuple[float, str]]:
    result = {}
    for n in sizes:
        files = {f"d{i % 100}/f{i}.py": f"x = {i}\n" for i in range(n)}
        cfg = SandboxConfig(limits=Limits(disk_mb=512), prewarm=0)
        async with await open_sandbox(cfg, files) as sb:
            sid = await sb.snapshot()
            mode = "overlay" if getattr(sb, "workspace", None) and sb.workspace.overlay else "copy"  # type: ignore[attr-defined]
            times = []
            for _ in range(repeats):
                await sb.exec("rm -rf d1 d2; echo changed > d3/f3.py")
                t = time.perf_counter()
                await sb.restore(sid)
                times.append(time.perf_counter() - t)
            check = await sb.exec(["cat", "d3/f3.py"])
            assert check.stdout == "x = 3\n", check
        result[n] = (ms(times), mode)
    return result


async def fresh_rate(cfg: SandboxConfig, seconds: float, workers: int) -> float:
    stop = time.monotonic() + seconds
    fresh = 0

    async def fresh_worker() -> None:
        nonlocal fresh
        while time.monotonic() < stop:
            async with await open_sandbox(cfg) as sb:
                assert (await sb.exec(CMD)).ok
            fresh += 1

    await asyncio.gather(*(fresh_worker() for _ in range(workers)))
    return fresh / seconds


async def throughput(seconds: float, workers: int) -> tuple[float, float, float]:
    cfg = SandboxConfig(prewarm=0)
    fresh = await fresh_rate(cfg, seconds, workers)
    fresh_bwrap = await fresh_rate(SandboxConfig(prewarm=0, launcher="bwrap"), seconds, workers)
    warm_count = 0
    stop = time.monotonic() + seconds

    async def warm_worker() -> None:
        nonlocal warm_count
        async with await open_sandbox(cfg) as sb:
            while time.monotonic() < stop:
                assert (await sb.exec(CMD)).ok
                warm_count += 1

    await asyncio.gather(*(warm_worker() for _ in range(workers)))
    return fresh, fresh_bwrap, warm_count / seconds


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    lat = await latency(args.iterations)
    bare = ms(lat["bare"])
    restores = await restore_times((10, 1_000, 10_000), repeats=10)
    fresh_rps, fresh_bwrap_rps, warm_rps = await throughput(args.seconds, args.workers)
    print(f"| measurement (median of {args.iterations}, interleaved) | ms | vs bare |")
    print("|---|---:|---:|")
    for key, label in (
        ("bare", "host: `python3 -I -S -c pass` (bare)"),
        ("cold_exec", "fresh sandbox (fork server, prewarm=0): exec of the same"),
        ("cold_total", "fresh sandbox (fork server, prewarm=0): open + exec + close"),
        ("cold_exec_real_total", "fresh sandbox (fork server), command exec'd: open + exec + close"),
        ("cold_bwrap_exec", "fresh sandbox (bubblewrap launcher, prewarm=0): exec of the same"),
        ("cold_bwrap_total", "fresh sandbox (bubblewrap launcher, prewarm=0): open + exec + close"),
        (
            "cold_bwrap_exec_real_total",
            "fresh sandbox (bubblewrap), command exec'd: open + exec + close",
        ),
        ("pooled_total", "fresh sandbox (prewarm=1, spare started ahead): open + exec + close"),
        ("warm", "warm sandbox: exec of the same"),
    ):
        print(f"| {label} | {ms(lat[key]):.1f} | {ms(lat[key]) / bare:.2f}x |")
    for n, (t, mode) in restores.items():
        print(f"| restore, {n:,} files ({mode}) | {t:.2f} | |")
    print(f"| fresh sandboxes (fork server) per second, {args.workers} workers | {fresh_rps:.1f}/s | |")
    print(f"| fresh sandboxes (bubblewrap) per second, {args.workers} workers | {fresh_bwrap_rps:.1f}/s | |")
    print(f"| warm execs per second, {args.workers} workers | {warm_rps:.1f}/s | |")
    if args.json:
        out = {
            "iterations": args.iterations,
            "seconds": args.seconds,
            "workers": args.workers,
            "latency_ms": {key: ms(values) for key, values in lat.items()},
            "restore_ms": {str(n): t for n, (t, _) in restores.items()},
            "restore_mode": {str(n): mode for n, (_, mode) in restores.items()},
            "fresh_per_s": fresh_rps,
            "fresh_bwrap_per_s": fresh_bwrap_rps,
            "warm_per_s": warm_rps,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    asyncio.run(main())
