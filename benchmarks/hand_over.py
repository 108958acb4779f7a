"""What a sandbox costs its next occupant: `restore` (the same occupant rolling back), `hand_over` (a new
occupant: a new workspace file system and a new PID 1) and a new sandbox (`open_sandbox` + `close`), each
followed by writing one file and running one Python command, per launcher, side by side in one run.

    .venv/bin/python benchmarks/hand_over.py --iterations 30 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox

PROBE = ["python3", "-c", "print(1)"]


async def _use(sandbox: Sandbox) -> None:
    await sandbox.write("a.py", "x = 1\n")
    result = await sandbox.exec(PROBE)
    assert result.stdout == "1\n", result


async def reused(launcher: str, iterations: int, hand_over: bool) -> list[float]:
    sandbox = await open_sandbox(SandboxConfig(launcher=launcher))
    try:
        snap = await sandbox.snapshot()
        times = []
        for _ in range(iterations):
            t = time.perf_counter()
            await (sandbox.hand_over(snap) if hand_over else sandbox.restore(snap))
            await _use(sandbox)
            times.append(time.perf_counter() - t)
        return times
    finally:
        await sandbox.close()


async def fresh(launcher: str, iterations: int) -> list[float]:
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        sandbox = await open_sandbox(SandboxConfig(launcher=launcher))
        try:
            await _use(sandbox)
        finally:
            await sandbox.close()
        times.append(time.perf_counter() - t)
    return times


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    rows = []
    print(f"{'launcher':>10} {'path':>10} {'median ms':>10} {'p90 ms':>8}")
    for launcher in ("forkserver", "bwrap"):
        for name in ("restore", "hand_over", "new"):
            if name == "new":
                times = await fresh(launcher, args.iterations)
            else:
                times = await reused(launcher, args.iterations, name == "hand_over")
            times.sort()
            p90 = times[int(0.9 * (len(times) - 1))]
            median = statistics.median(times)
            print(f"{launcher:>10} {name:>10} {median * 1000:>10.1f} {p90 * 1000:>8.1f}")
            rows.append(
                {"launcher": launcher, "path": name, "median_ms": median * 1000, "p90_ms": p90 * 1000}
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
