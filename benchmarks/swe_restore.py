"""Restore time of a SWE task's workspace image as the number of files grows.

For each size: one sandbox holding N files (a package tree of ~4 KiB modules) is snapshotted; each
iteration changes a file and adds one (what a graded run leaves), then restores the snapshot; the
restore's wall time is recorded. Prints the median and p90 per size. With `--repos`, the same for the
real workspace images of pinned repositories (`trialground.tasks.swe.repos`: the sdist's text files plus
the bundled pytest), each iteration changing one of its library files.

    .venv/bin/python benchmarks/swe_restore.py --sizes 200 2000 8000 --iterations 30 [--json out.json]
    .venv/bin/python benchmarks/swe_restore.py --sizes --repos inflection fonttools --iterations 50

`--hand-over` measures `Sandbox.hand_over` instead (what each graded run of a repository task pays: a new
workspace file system holding the image's files and a new PID 1), beside `restore` in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from trialground.sandbox.base import Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox

MODULE = "def f(x):\n    return x + 1\n" * 140  # ~4 KiB


async def measure(
    n: int,
    iterations: int,
    files: dict[str, str] | None = None,
    target: str = "pkg/sub0/mod0.py",
    hand_over: bool = False,
) -> tuple[float, float, float]:
    files = files or {f"pkg/sub{i // 100}/mod{i}.py": MODULE for i in range(n)}
    disk_mb = max(256, n * 8 // 1000 + 64, sum(len(t) for t in files.values()) * 3 // (1 << 20) + 64)
    config = SandboxConfig(limits=Limits(disk_mb=disk_mb))
    t0 = time.perf_counter()
    sandbox = await open_sandbox(config, files)
    sid = await sandbox.snapshot()
    build = time.perf_counter() - t0
    times = []
    try:
        for i in range(iterations):
            res = await sandbox.exec(f"echo '# changed' >> {target} && echo new > scratch{i}.py")
            assert res.ok, res.stderr
            t = time.perf_counter()
            await (sandbox.hand_over(sid) if hand_over else sandbox.restore(sid))
            times.append(time.perf_counter() - t)
        check = await sandbox.exec(f"test ! -e scratch0.py && ! grep -q '# changed' {target}")
        assert check.ok, "restore did not bring back the snapshot"
    finally:
        await sandbox.close()
    times.sort()
    return build, statistics.median(times), times[int(0.9 * (len(times) - 1))]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[200, 2000, 8000])
    ap.add_argument("--repos", nargs="*", default=[], help="pinned repositories to measure too")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--hand-over", action="store_true", help="also time hand_over (a new occupant)")
    args = ap.parse_args()
    rows = []
    head = f"{'image':>16} {'files':>7} {'build s':>14} {'restore median ms':>18} {'restore p90 ms':>15}"
    print(head)

    def row(image: str, n: int, build: float, med: float, p90: float) -> None:
        print(f"{image:>16} {n:>7} {build:>14.2f} {med * 1000:>18.2f} {p90 * 1000:>15.2f}")
        rows.append(
            {
                "image": image,
                "files": n,
                "build_s": build,
                "restore_median_ms": med * 1000,
                "restore_p90_ms": p90 * 1000,
            }
        )

    modes = [False, True] if args.hand_over else [False]
    for n in args.sizes:
        for mode in modes:
            row(
                "synthetic" + (" hand_over" if mode else ""),
                n,
                *await measure(n, args.iterations, hand_over=mode),
            )
    for name in args.repos:
        from trialground.tasks.swe.build import workspace_image_files
        from trialground.tasks.swe.repos import is_mutable, repo_spec

        spec = repo_spec(name)
        files = workspace_image_files(spec)
        target = sorted(p for p in files if is_mutable(spec, p) and p.endswith(".py"))[0]
        for mode in modes:
            label = name + (" hand_over" if mode else "")
            row(label, len(files), *await measure(len(files), args.iterations, files, target, mode))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
