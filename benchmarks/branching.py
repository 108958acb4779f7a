"""Branching rollouts vs k independent rollouts, side by side in one run of the real training loop.

Both modes run `trialground.orchestrator.loop.run` on `examples/agent.yaml` (the agentic task families,
real bubblewrap sandboxes from the environment pool, real grading, the real trainer) with the same seed
and the same batch shape (`--batch-tasks` tasks x `--k` samples); the only difference is `loop.branch`
(off, then `--point`). The held-out evaluations at the start and end are skipped in both (identical work,
not what is compared).

Reported per mode, over the N steps:
- sandbox-seconds per trained sample: pool acquire (create or restore), reset, tool runs and grading, and
  forks, summed over the step -- a trunk's once for its group -- divided by trajectories with a reward
  (`rollout/sandbox_s_per_sample`);
- generated tokens per trained sample (a trunk's prefix counted once; `rollout/generated_tokens_per_sample`);
- wall seconds for the N steps, and seconds of rollout per step;
- the training reward (`reward/mean`) of the last step and of the last step each mode finished within the
  *same* wall time (the shorter of the two runs): reward at equal wall time;
- for branching: groups that branched, fallbacks, mean prefix tokens, sandbox-seconds saved.

    .venv/bin/python benchmarks/branching.py --steps 6 --batch-tasks 4 --k 4
    .venv/bin/python benchmarks/branching.py --model tiny-agent   # when the bundled agent policy exists
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from async_vs_sync import skip_eval

from trialground.orchestrator import loop as loop_module
from trialground.orchestrator.run_config import load_config

AGENT = Path(__file__).resolve().parents[1] / "examples" / "agent.yaml"


def run_mode(mode: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    overrides = [
        f"name=bench-{mode}",
        f"output_dir={out}",
        f"seed={args.seed}",
        f"policy.model={args.model}",
        f"loop.steps={args.steps}",
        f"loop.batch_tasks={args.batch_tasks}",
        f"loop.samples_per_task={args.k}",
        f"loop.rollout_concurrency={args.batch_tasks}",
        "loop.eval_interval=0",
        f"loop.branch={mode}",
        f"tasks.num_train={args.num_train}",
        "tasks.num_eval=1",
        *args.set,
    ]
    config = load_config(AGENT, overrides)
    stamps: list[tuple[float, dict[str, float]]] = []
    t0 = time.perf_counter()

    def progress(step: int, metrics: dict[str, float]) -> None:
        if step > 0:  # step 0 reports the run's start-up metrics, no rollouts
            stamps.append((time.perf_counter() - t0, dict(metrics)))

    loop_module._eval_and_log = skip_eval  # type: ignore[assignment]
    load_before = os.getloadavg()[0]
    asyncio.run(loop_module.run(config, progress=progress))
    trained = [m["rollout/trajectories"] * (1.0 - m.get("env/error_rate", 0.0)) for _, m in stamps]
    n = max(1e-9, sum(trained))

    def per_sample(key: str) -> float:
        return sum(m.get(key, 0.0) * w for (_, m), w in zip(stamps, trained, strict=True)) / n

    return {
        "mode": mode,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "steps": len(stamps),
        "wall_s": stamps[-1][0] if stamps else 0.0,
        "stamps": [(t, m.get("reward/mean", 0.0)) for t, m in stamps],
        "trained_samples": sum(trained),
        "sandbox_s_per_sample": per_sample("rollout/sandbox_s_per_sample"),
        "generated_tokens_per_sample": per_sample("rollout/generated_tokens_per_sample"),
        "sandbox_s_parts": {
            part: per_sample(f"rollout/sandbox_s_per_sample/{part}")
            for part in ("acquire", "reset", "env", "fork", "trunk")
        },
        "rollout_s_per_step": sum(m["rollout/batch_s"] for _, m in stamps) / max(1, len(stamps)),
        "reward_last": stamps[-1][1].get("reward/mean", 0.0) if stamps else 0.0,
        "reward_mean": sum(m.get("reward/mean", 0.0) for _, m in stamps) / max(1, len(stamps)),
        "turns_mean": sum(m.get("rollout/turns_mean", 0.0) for _, m in stamps) / max(1, len(stamps)),
        "branch_groups": sum(m.get("rollout/branch_groups", 0.0) for _, m in stamps),
        "branch_fallbacks": sum(m.get("rollout/branch_fallbacks", 0.0) for _, m in stamps),
        "branch_prefix_tokens_mean": (
            sum(m.get("rollout/branch_prefix_tokens_mean", 0.0) for _, m in stamps) / max(1, len(stamps))
        ),
        "branch_sandbox_s_saved": sum(m.get("rollout/branch_sandbox_s_saved", 0.0) for _, m in stamps),
    }


def at_wall(result: dict[str, Any], wall: float) -> tuple[int, float]:
    """(steps finished by `wall` seconds, reward/mean of the last of them)."""
    done = [(i + 1, r) for i, (t, r) in enumerate(result["stamps"]) if t <= wall + 1e-9]
    return done[-1] if done else (0, 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-tasks", type=int, default=4)
    ap.add_argument("--k", type=int, default=4, help="samples per task = branches per trunk")
    ap.add_argument("--point", choices=["first_obs", "first_failure"], default="first_obs")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--num-train", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="extra config override (repeatable)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--branch-first", action="store_true", help="run the branching mode first (to see order effects)"
    )
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="tg-branching-"))
    try:
        modes = [args.point, "off"] if args.branch_first else ["off", args.point]
        by_mode = {mode: run_mode(mode, args, out) for mode in modes}
        results = [by_mode["off"], by_mode[args.point]]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    wall = min(r["wall_s"] for r in results)
    rows = [
        ("steps", "{:d}", "steps"),
        ("machine load average (1 min) before / after", None, "load"),
        ("wall s", "{:.1f}", "wall_s"),
        ("rollout s / step", "{:.2f}", "rollout_s_per_step"),
        ("trained samples", "{:.0f}", "trained_samples"),
        ("sandbox-s / trained sample", "{:.3f}", "sandbox_s_per_sample"),
        ("  of which acquire / reset / tools+grading / fork / trunk", None, "parts"),
        ("generated tokens / trained sample", "{:.1f}", "generated_tokens_per_sample"),
        ("reward/mean, last step", "{:.3f}", "reward_last"),
        ("reward/mean, mean over steps", "{:.3f}", "reward_mean"),
        ("rollout/turns_mean (own turns)", "{:.2f}", "turns_mean"),
        ("branched groups / fallbacks", None, None),
        ("prefix tokens (mean)", "{:.1f}", "branch_prefix_tokens_mean"),
        ("sandbox-s saved (sum)", "{:.2f}", "branch_sandbox_s_saved"),
    ]
    print(
        f"model={args.model} tasks/step={args.batch_tasks} k={args.k} steps={args.steps} point={args.point}"
    )
    print(f"| measurement | off | {args.point} |\n|---|---:|---:|")
    for label, fmt, key in rows:
        if key == "load":
            cells = [f"{r['load_before']:.1f} / {r['load_after']:.1f}" for r in results]
        elif key == "parts":
            cells = [" / ".join(f"{v:.3f}" for v in r["sandbox_s_parts"].values()) for r in results]
        elif key is None:
            cells = [f"{r['branch_groups']:.0f} / {r['branch_fallbacks']:.0f}" for r in results]
        else:
            cells = [fmt.format(r[key]) for r in results]  # type: ignore[union-attr]
        print(f"| {label} | {cells[0]} | {cells[1]} |")
    eq = [at_wall(r, wall) for r in results]
    cells = [f"{steps}, {reward:.3f}" for steps, reward in eq]
    print(f"| at equal wall time ({wall:.1f} s): steps, reward/mean | {cells[0]} | {cells[1]} |")
    ratio = results[1]["sandbox_s_per_sample"] / max(1e-9, results[0]["sandbox_s_per_sample"])
    print(f"sandbox-s per trained sample, branching / independent: {ratio:.2f}x")
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
