"""Sandbox pool service levels: N concurrent tool episodes on real bwrap sandboxes through `EnvPool`.

    .venv/bin/python benchmarks/sandbox_slo.py [--concurrency 64,256,1024] [--execs 3] [--settle S] [--quick]

For each N: one `EnvPool` with `max_active=N` over the real bwrap backend (`LocalBackend`, as
benchmarks/pool.py section 3), and N workers that each run two episodes:

1. cold: `acquire` a task of its own (no sandbox exists yet: created), `reset`, `--execs` bash tool calls
   that run `python3 -c` in the sandbox and check its output, then wait until all N hold their
   environment (the memory sample is taken there), `release`;
2. warm: `acquire` again, half the workers the same task (the pool restores the parked sandbox and checks
   it is alive) and half a new task (the pool reseeds a parked sandbox of another task), the same tool
   calls, `release`.

Reported per N: acquire latency p50/p95 (cold: creation; warm: restore or reseed), exec round trip p50/p95
(one tool call, as `ToolEnv.step` times it), the pool's own restore and reseed latency p50/p95, failed
episodes (an exception, a tool call whose output is wrong, an episode that ended in an error; the rate is
failed / episodes) and the pool's own errors (every exception it caught, also those it recovered from, such
as a failed create it retried), the memory of every process of this benchmark (this one, the fork server,
every sandbox) while all N environments are held, as the sum of PSS (proportional set size, shared pages
split between their users) and of RSS, per concurrent sandbox, with this process's open file descriptors then,
this process's peak RSS (over its life: all levels run in one process), wall time, and the 1-minute load
average before and after (the sandboxes' own processes raise it). Exit status 1 on any failure or error.

`--cluster ray --ray-workers W`: the same through `pool.backend: ray`, a local Ray cluster with W
sandbox-worker actors (each hosts its share of the sandboxes; every pool call is an actor call). Ray and
its workers start before the clock (`backend_start_s`); memory then counts this process, the workers and
every process below them (Ray's own daemons, raylet and GCS, are not counted).

Each exec's wall-clock limit is `--wall-s` (600 s) instead of the default `Limits.wall_s` of 10 s: the N
commands share the host's cores, so on a small host a `python3` start waits for CPU longer than 10 s
(2 cores, N = 256: 24 % of the tool calls hit it) and the default would measure the CPU queue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.pool import EnvPool, PoolConfig
from trialground.pool.backend import LocalBackend
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.tasks.model import Task, VerifierSpec

FIELDS = (
    "n",
    "cluster",
    "episodes",
    "failures",
    "failure_rate",
    "pool_errors",
    "acquire_cold_p50_ms",
    "acquire_cold_p95_ms",
    "acquire_warm_p50_ms",
    "acquire_warm_p95_ms",
    "exec_p50_ms",
    "exec_p95_ms",
    "restore_p50_ms",
    "restore_p95_ms",
    "reseed_p50_ms",
    "reseed_p95_ms",
    "processes",
    "pss_mib",
    "rss_mib",
    "pss_per_sandbox_mib",
    "rss_per_sandbox_mib",
    "fds_self",
    "peak_rss_self_mib",
    "wall_s",
    "backend_start_s",
    "load_before",
    "load_after",
)


class NoGrader:
    async def grade(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not graded in this benchmark")


def task(i: int) -> Task:
    return Task(
        domain="code", prompt=f"t{i}", files={"a.py": f"x = {i}\n"}, verifier=VerifierSpec(kind="code_tests")
    )


def probe(k: int, e: int) -> tuple[str, str]:
    """Worker k's e-th tool call: a Python program run in the sandbox, and the output it must print."""
    return f'python3 -c \'print("{k}:{e}:", {k}*1000+{e}, sep="")\'', f"{k}:{e}:{k * 1000 + e}"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def load1() -> float:
    return os.getloadavg()[0]


def descendants(root: int) -> list[int]:
    """Every live process below `root` (by parent pid), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            found.append(child)
            todo.append(child)
    return found


def memory_of(pids: list[int]) -> tuple[int, float, float]:
    """(processes read, sum of PSS MiB, sum of RSS MiB) from /proc/PID/smaps_rollup."""
    n, pss, rss = 0, 0, 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        n += 1
        for line in text.splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            elif line.startswith("Rss:"):
                rss += int(line.split()[1])
    return n, pss / 1024, rss / 1024


def sample_memory(roots: list[int]) -> tuple[int, float, float, int]:
    """(processes, PSS MiB, RSS MiB) of this process, the `roots` (Ray's sandbox workers) and all below
    them, and this process's open fds."""
    pids = {os.getpid(), *roots}
    for root in list(pids):
        pids.update(descendants(root))
    return (*memory_of(sorted(pids)), len(os.listdir("/proc/self/fd")))


async def ray_worker_pids(backend: Any) -> list[int]:
    """The process ids of a `RayBackend`'s sandbox workers (each hosts its sandboxes below it)."""
    refs = [w.handle.node.remote() for w in backend.workers if w.alive]
    return [pid for _node, pid in await asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs))]


def make_backend(cluster: str, sandbox_config: SandboxConfig, pool_config: PoolConfig) -> Any:
    if cluster == "local":
        return LocalBackend(sandbox_config)
    from trialground.pool.ray_backend import RayBackend

    # a local Ray cluster on this machine's cores; the workers reserve a share of a CPU each, so W of
    # them start on a small host (they spend their time waiting on sandboxes)
    return RayBackend(sandbox_config, pool_config, num_cpus=os.cpu_count() or 1, include_dashboard=False)


async def level(
    n: int, execs: int, timeout_s: float, wall_s: float, cluster: str = "local", ray_workers: int = 4
) -> dict[str, Any]:
    sandbox_config = SandboxConfig(limits=Limits(wall_s=wall_s))
    pool_config = PoolConfig(
        max_active=n, max_queue=n, max_idle=n, acquire_timeout_s=timeout_s, lease_s=10 * timeout_s,
        backend=cluster, ray_workers=ray_workers, ray_worker_cpus=(os.cpu_count() or 1) / ray_workers,
    )  # fmt: skip
    backend = make_backend(cluster, sandbox_config, pool_config)
    pool = EnvPool(
        pool_config,
        env_config=EnvConfig(
            kind="tool", max_turns=execs + 1, max_episode_s=timeout_s, tool_timeout_s=timeout_s
        ),
        sandbox_config=sandbox_config,
        grader=NoGrader(),
        backend=backend,
    )
    failures: Counter[str] = Counter()  # failed episodes by cause, one count per episode
    acquire: dict[str, list[float]] = {"cold": [], "warm": []}
    exec_s: list[float] = []
    held = asyncio.Barrier(n)
    memory: list[tuple[int, float, float, int]] = []
    examples: list[str] = []  # the first wrong outputs, for the report

    async def episode(k: int, t: Task, phase: str) -> None:
        t0 = time.perf_counter()
        env = await pool.acquire(t)
        acquire[phase].append(time.perf_counter() - t0)
        failed = True
        try:
            assert isinstance(env, ToolEnv)
            await env.reset(t)
            for e in range(execs):
                command, want = probe(k, e)
                call = format_tool_call("bash", {"command": command})
                t0 = time.perf_counter()
                obs = await env.step(call)
                exec_s.append(time.perf_counter() - t0)
                if obs.end is not None and obs.end.error is not None:
                    failures[f"episode:{obs.end.error.kind}"] += 1
                    break
                if obs.text != f"[exit 0]\n{want}":
                    failures["wrong_output"] += 1
                    examples.append(obs.text[:300])
                    break
            else:
                failed = False
            if phase == "cold":
                if await held.wait() == 0:  # one worker samples while all N hold their environment
                    roots = await ray_worker_pids(backend) if cluster == "ray" else []
                    memory.append(await asyncio.to_thread(sample_memory, roots))
                await held.wait()
        finally:
            await pool.release(env, failed=failed)

    async def worker(k: int) -> None:
        for phase, t in (("cold", task(k)), ("warm", task(k) if k % 2 == 0 else task(n + k))):
            try:
                await episode(k, t, phase)
            except Exception as e:  # every exception is a failure, counted by its kind
                failures[f"{type(e).__name__}:{getattr(e, 'kind', '')}"] += 1
                if phase == "cold" and not held.broken:
                    await held.abort()  # the others must not wait for this one

    t0 = time.perf_counter()
    if cluster == "ray":  # Ray and its workers start before the clock (reported as backend_start_s)
        await backend.start()
    backend_start_s = time.perf_counter() - t0
    before = load1()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(n)))
    wall = time.perf_counter() - t0
    metrics = pool.metrics()
    await pool.close()
    # exceptions the pool caught itself (a failed create it retried, a reseed that fell back, ...): errors
    # even where no episode failed; caller_error is the pool's count of this benchmark's failed episodes
    errors = {
        kind.removeprefix("pool/failures/"): int(count)
        for kind, count in metrics.items()
        if kind.startswith("pool/failures/") and kind != "pool/failures/caller_error" and count
    }
    procs, pss, rss, fds = memory[0] if memory else (0, float("nan"), float("nan"), 0)
    episodes = 2 * n
    total = sum(failures.values())
    ms = 1e3
    out: dict[str, Any] = {
        "n": n,
        "cluster": cluster if cluster == "local" else f"ray ({ray_workers} workers)",
        "episodes": episodes,
        "failures": total,
        "failure_rate": total / episodes,
        "acquire_cold_p50_ms": pct(acquire["cold"], 0.5) * ms,
        "acquire_cold_p95_ms": pct(acquire["cold"], 0.95) * ms,
        "acquire_warm_p50_ms": pct(acquire["warm"], 0.5) * ms,
        "acquire_warm_p95_ms": pct(acquire["warm"], 0.95) * ms,
        "exec_p50_ms": pct(exec_s, 0.5) * ms,
        "exec_p95_ms": pct(exec_s, 0.95) * ms,
        "restore_p50_ms": metrics["pool/restore_p50_s"] * ms,
        "restore_p95_ms": metrics["pool/restore_p95_s"] * ms,
        "reseed_p50_ms": metrics["pool/reseed_p50_s"] * ms,
        "reseed_p95_ms": metrics["pool/reseed_p95_s"] * ms,
        "processes": procs,
        "pss_mib": pss,
        "rss_mib": rss,
        "pss_per_sandbox_mib": pss / n,
        "rss_per_sandbox_mib": rss / n,
        "fds_self": fds,
        "peak_rss_self_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "wall_s": wall,
        "backend_start_s": backend_start_s,
        "load_before": before,
        "load_after": load1(),
        "pool_errors": sum(errors.values()),
        "failure_kinds": dict(failures),
        "pool_error_kinds": errors,
        "failure_examples": examples[:5],
        "created": metrics["pool/created"],
        "reseeded": metrics["pool/reseeded"],
    }
    return out


def settle(seconds: float) -> None:
    """Wait (at most `seconds`) until the 1-minute load average is below the core count again: the last
    level's sandboxes raise it for minutes after they are gone."""
    deadline = time.monotonic() + seconds
    while load1() >= (os.cpu_count() or 1) and time.monotonic() < deadline:
        time.sleep(5)


def run(
    levels: list[int],
    execs: int,
    timeout_s: float,
    wall_s: float,
    settle_s: float = 0.0,
    cluster: str = "local",
    ray_workers: int = 4,
) -> list[dict[str, Any]]:
    rows = []
    for n in levels:
        settle(settle_s)
        rows.append(asyncio.run(level(n, execs, timeout_s, wall_s, cluster, ray_workers)))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(FIELDS) + " |", "|" + "---:|" * len(FIELDS)]
    for r in rows:
        cells = [f"{r[f]:.3g}" if isinstance(r[f], float) else str(r[f]) for f in FIELDS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="64,256,1024", help="comma-separated N")
    ap.add_argument("--execs", type=int, default=3, help="tool calls per episode")
    ap.add_argument("--timeout", type=float, default=900.0, help="acquire and episode timeout, seconds")
    ap.add_argument(
        "--wall-s",
        type=float,
        default=600.0,
        help="wall-clock limit of each exec (Limits.wall_s, default there 10 s): N concurrent commands share "
        "the host's cores, so on a small host the default measures the CPU queue, not the sandbox",
    )
    ap.add_argument("--quick", action="store_true", help="N = 4, 16 (smoke run)")
    ap.add_argument(
        "--settle", type=float, default=0.0, help="before each level, wait up to this many seconds for the "
        "load average to drop below the core count",
    )  # fmt: skip
    ap.add_argument(
        "--cluster", choices=["local", "ray"], default="local", help="the pool's backend: sandboxes in this "
        "process's fork server, or on Ray sandbox-worker actors of a local Ray cluster (`pool.backend: ray`)",
    )  # fmt: skip
    ap.add_argument("--ray-workers", type=int, default=4, help="sandbox-worker actors (--cluster ray)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    levels = [4, 16] if args.quick else [int(x) for x in args.concurrency.split(",")]
    rows = run(levels, args.execs, args.timeout, args.wall_s, args.settle, args.cluster, args.ray_workers)
    print(table(rows))
    for r in rows:
        if r["failures"] or r["pool_errors"]:
            print(
                f"N={r['n']}: failed episodes {r['failure_kinds']}, e.g. {r['failure_examples']}; "
                f"errors inside the pool {r['pool_error_kinds']}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    sys.exit(1 if any(r["failures"] or r["pool_errors"] for r in rows) else 0)


if __name__ == "__main__":
    main()
