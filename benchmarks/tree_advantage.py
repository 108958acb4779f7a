"""Turn-level (tree) advantages against trajectory GRPO, in the real training loop at equal sandbox time.

For each recipe and seed, two runs of `trialground.orchestrator.loop.run` that differ only in
`trainer.advantage` (trajectory, then tree); both use branching rollouts (`--branch`, default
`first_obs`), so siblings share a prefix whose value they estimate. Reported per run: the held-out
greedy solve rate before and after (`eval/pass@1` at step 0 and at the last step), the training reward of
the last steps, and the sandbox-seconds the run spent (`rollout/sandbox_s_per_sample` x trajectories,
summed over steps). Equal sandbox time: the same steps and batch shape; the table states each run's
sandbox-seconds, and the training reward is also read at the smaller of the two runs' totals.

    .venv/bin/python benchmarks/tree_advantage.py --recipe examples/longctx_cpu.yaml --seeds 0 1 2
    .venv/bin/python benchmarks/tree_advantage.py --recipe examples/agent.yaml --steps 25 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from run_all_tables import render_tree

from trialground.orchestrator.loop import run
from trialground.orchestrator.run_config import load_config


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]


def _summary(run_dir: Path, wall_s: float) -> dict[str, Any]:
    rows = _rows(run_dir)
    steps = [r for r in rows if "train/loss" in r or "train/skipped" in r]
    evals = [r for r in rows if "eval/pass@1" in r]
    spent, curve = 0.0, []
    for r in steps:
        spent += r.get("rollout/sandbox_s_per_sample", 0.0) * r.get("rollout/trajectories", 0.0)
        curve.append((spent, r.get("reward/outcome_mean", 0.0)))
    last = [o for _, o in curve[-5:]]
    return {
        "eval_before": evals[0]["eval/pass@1"] if evals else None,
        "eval_after": evals[-1]["eval/pass@1"] if len(evals) > 1 else None,
        "outcome_last5": sum(last) / max(1, len(last)),
        "sandbox_s": spent,
        "curve": curve,
        "wall_s": wall_s,
        "steps": len(steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--steps", type=int, default=None, help="override loop.steps")
    ap.add_argument("--branch", default="first_obs", choices=["off", "first_obs", "first_failure"])
    ap.add_argument("--set", action="append", default=[], help="extra dotted overrides")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for advantage in ("trajectory", "tree"):
                overrides = [
                    f"seed={seed}",
                    f"trainer.advantage={advantage}",
                    f"loop.branch={args.branch}",
                    f"output_dir={tmp}",
                    f"name={advantage}-{seed}",
                    *args.set,
                ]
                if args.steps is not None:
                    overrides += [f"loop.steps={args.steps}", f"loop.eval_interval={args.steps}"]
                t0 = time.perf_counter()
                summary = asyncio.run(run(load_config(args.recipe, overrides)))
                res = {"seed": seed, "advantage": advantage}
                res |= _summary(Path(summary.run_dir), time.perf_counter() - t0)
                results.append(res)
                print(json.dumps({k: v for k, v in res.items() if k != "curve"}), flush=True)
    print(render_tree(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
