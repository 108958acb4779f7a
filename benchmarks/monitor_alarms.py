"""False-alarm rate and detection delay of the default alert rules on synthetic runs.

    .venv/bin/python benchmarks/monitor_alarms.py --clean 200 --faulty 50 [--json out.json]
    .venv/bin/python benchmarks/monitor_alarms.py --eval-tasks 32 --min-gap-z 0   # a small probe, no gate

Clean runs: the share of runs with at least one alert (any rule), and alerts per 1000 steps.
Faulty runs (fault at step 100): the share where the expected rule fired, and its delay in steps.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from trialground.monitor import Monitor, MonitorConfig
from trialground.monitor.synthetic import FAULTS, synthetic_run

EXPECTED = {
    "env_errors": "env_anomaly",
    "backlog": "backlog",
    "verifier_drift": "reward_drift",
    "hacking": "reward_eval_divergence",
    "length_hack": "response_length",
    "entropy_collapse": "entropy_collapse",
}


def run(seed: int, fault: str | None, args: argparse.Namespace) -> list[tuple[int, str, str]]:
    cfg = MonitorConfig(sinks=(), console=False)
    if args.min_gap_z is not None:
        rule = cfg.rules.reward_eval_divergence.model_copy(update={"min_gap_z": args.min_gap_z})
        cfg = cfg.model_copy(update={"rules": cfg.rules.model_copy(update={"reward_eval_divergence": rule})})
    with tempfile.TemporaryDirectory() as d:
        mon = Monitor(d, cfg)
        fired = []
        runs = synthetic_run(seed, args.steps, fault=fault, eval_tasks=args.eval_tasks)  # type: ignore[arg-type]
        for step, metrics in runs:
            fired += [(a.step, a.rule, a.evidence.key) for a in mon.observe(step, metrics)]
        mon.close()
    return fired


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clean", type=int, default=200)
    ap.add_argument("--faulty", type=int, default=50)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval-tasks", type=int, default=256, help="tasks behind each evaluation's pass rate")
    ap.add_argument(
        "--min-gap-z", type=float, default=None, help="the divergence rule's min_gap_z (default: its own)"
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    by_rule: collections.Counter[str] = collections.Counter()
    runs_with_alert = 0
    total = 0
    for seed in range(args.clean):
        fired = run(seed, None, args)
        runs_with_alert += bool(fired)
        total += len(fired)
        by_rule.update(f"{r}:{k}" for _, r, k in fired)
    print(f"clean runs: {args.clean} x {args.steps} steps, evaluations over {args.eval_tasks} tasks")
    print(f"  runs with any alert: {runs_with_alert}/{args.clean} = {runs_with_alert / args.clean:.3f}")
    print(f"  alerts per 1000 steps: {1000 * total / (args.clean * args.steps):.3f}")
    for k, v in by_rule.most_common():
        print(f"    {k}: {v}")
    results: dict[str, Any] = {
        "eval_tasks": args.eval_tasks,
        "min_gap_z": args.min_gap_z,
        "clean": {
            "runs": args.clean,
            "steps": args.steps,
            "runs_with_alert": runs_with_alert,
            "alerts_per_1000_steps": 1000 * total / (args.clean * args.steps),
            "by_rule": dict(by_rule),
        },
        "faulty": [],
    }
    print(f"faulty runs: {args.faulty} seeds per fault, fault at step 100")
    for fault in FAULTS:
        delays, other = [], collections.Counter()
        for seed in range(10_000, 10_000 + args.faulty):
            fired = run(seed, fault, args)
            hits = [s for s, r, _ in fired if r == EXPECTED[fault] and s >= 100]
            if hits:
                delays.append(hits[0] - 100)
            other.update(r for s, r, _ in fired if r != EXPECTED[fault])
        d = np.array(delays) if delays else np.array([np.nan])
        results["faulty"].append(
            {
                "fault": fault,
                "rule": EXPECTED[fault],
                "detected": len(delays),
                "runs": args.faulty,
                "delay_median": float(np.median(d)),
                "delay_max": float(np.max(d)),
                "other_rules": dict(other),
            }
        )
        print(
            f"  {fault:17s} -> {EXPECTED[fault]:23s} detected {len(delays)}/{args.faulty}, "
            f"delay median {np.median(d):.0f} max {np.max(d):.0f} steps; other rules: {dict(other)}"
        )
    print(f"wall {time.perf_counter() - t0:.1f}s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
