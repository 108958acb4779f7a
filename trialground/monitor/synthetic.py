"""Synthetic training runs with optional injected faults, for testing the alert rules and the report.

A clean run looks like a healthy RL run: reward and held-out pass@1 rise together along a saturating
curve, rates are binomial noise around small constants, the queue is stationary, entropy decays gently.
Faults start at `fault_step`:

| fault | what changes | rule expected |
|---|---|---|
| `env_errors` | sandbox error rate 2% -> 25%, timeouts 1% -> 8% | env_anomaly |
| `backlog` | queue depth and p99 wait grow linearly | backlog |
| `verifier_drift` | the canary of known-bad submissions starts passing, more each time | reward_drift |
| `hacking` | training reward climbs faster while eval falls; flag rate creeps up | reward_eval_divergence |
| `length_hack` | response length jumps +80% while accuracy stays flat | response_length |
| `entropy_collapse` | entropy falls to ~5% of its start | entropy_collapse |
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np

Fault = Literal["env_errors", "backlog", "verifier_drift", "hacking", "length_hack", "entropy_collapse"]
FAULTS: tuple[Fault, ...] = (
    "env_errors",
    "backlog",
    "verifier_drift",
    "hacking",
    "length_hack",
    "entropy_collapse",
)
DOMAINS = ("code", "math")


def synthetic_run(
    seed: int,
    steps: int = 200,
    *,
    fault: Fault | None = None,
    fault_step: int = 100,
    eval_interval: int = 10,
    canary_interval: int = 5,
    batch: int = 64,
    eval_tasks: int = 256,
) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield (step, metrics) for steps 0..steps-1, as the training loop would feed `Monitor.observe`;
    evaluations are pass rates over `eval_tasks` tasks."""
    rng = np.random.default_rng(seed)

    def rate(p: float, n: int = batch) -> float:
        return float(rng.binomial(n, min(max(p, 0.0), 1.0)) / n)

    hack_gain = 0.0
    for step in range(steps):
        faulty = fault is not None and step >= fault_step
        since = step - fault_step if faulty else 0
        true_r = 0.2 + 0.5 * (1.0 - math.exp(-step / 80.0))
        if fault == "hacking" and faulty:
            hack_gain = min(0.3, 0.006 * since)
        outcome = rate(true_r + hack_gain)
        m: dict[str, float] = {
            "reward/mean": outcome,
            "reward/outcome_mean": outcome,
            "env/error_rate": rate(0.25 if fault == "env_errors" and faulty else 0.02),
            "env/timeout_rate": rate(0.08 if fault == "env_errors" and faulty else 0.01),
            "env/exec_p50_s": float(rng.gamma(20, 0.01)),
            "env/exec_p99_s": float(rng.gamma(20, 0.05)),
            "env/sandbox_s": float(rng.gamma(50, 1.0)),
            "pool/active": float(rng.integers(2, 5)),
            "pool/capacity": 4.0,
            "pool/queue_depth": float(rng.poisson(3) + (1.5 * since if fault == "backlog" else 0)),
            "pool/wait_p99_s": float(rng.gamma(10, 0.05) + (0.2 * since if fault == "backlog" else 0)),
            "hack/flag_rate": rate(0.01 + (min(0.1, 0.002 * since) if fault == "hacking" else 0.0)),
            "rollout/response_len_mean": float(
                rng.normal(40.0 * (1.8 if fault == "length_hack" and faulty else 1.0), 1.5)
            ),
            "rollout/clip_ratio": rate(0.03),
            "rollout/generated_tokens": float(batch * 40),
            "rollout/useful_tokens": float(batch * 40 * (1 - true_r**8 - (1 - true_r) ** 8)),
            "train/zero_var_group_frac": rate(true_r**8 + (1 - true_r) ** 8, 8),
            "train/entropy": float(
                (0.05 if fault == "entropy_collapse" and faulty else 1.5 - 0.3 * step / steps)
                + rng.normal(0, 0.03)
            ),
            "train/loss": float(rng.normal(0.1, 0.02)),
            "train/step_s": float(rng.gamma(30, 0.1)),
            "verify/judge_disagreement": rate(0.05),
            "verify/error_rate/codegen": rate(0.01),
        }
        for i, d in enumerate(DOMAINS):
            m[f"reward/mean/{d}"] = rate(true_r + hack_gain + (0.1 if i == 0 else -0.1), batch // 2)
            m[f"reward/tasks/{d}"] = float(batch // 2 // 8)  # groups of 8 samples
        if step % canary_interval == 0:
            bad_p = min(0.8, 0.02 * since) if fault == "verifier_drift" else 0.0
            m["canary/good_pass_rate"] = rate(0.998, 20)
            m["canary/bad_pass_rate"] = rate(bad_p, 20)
        if step % eval_interval == 0 and step > 0:
            eval_p = true_r * 0.9
            if fault == "hacking" and faulty:
                eval_p = true_r * 0.9 - min(0.3, 0.004 * since)
            m["eval/pass@1"] = rate(eval_p, eval_tasks)
            m["eval/n_tasks"] = float(eval_tasks)  # as a run logs it: the divergence rule's sampling error
            for i, d in enumerate(DOMAINS):
                m[f"eval/pass@1/{d}"] = rate(eval_p + (0.1 if i == 0 else -0.1), max(1, eval_tasks // 2))
        yield step, m


def write_synthetic_run_dir(
    run_dir: str | Path,
    seed: int = 0,
    steps: int = 120,
    *,
    fault: Fault | None = "hacking",
    fault_step: int = 60,
    tasks_per_step: int = 4,
    samples: int = 4,
) -> Path:
    """A complete run directory (metrics, alerts, trajectories, flagged, regressions) for report tests.

    Trajectory Parquet files follow the orchestrator's column names (step, task_id, domain, group_id,
    sample_index, policy_version, reward, outcome, advantage, flags, flag_evidence, error_kind, ...).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trialground.monitor.config import MonitorConfig
    from trialground.monitor.monitor import Monitor

    path = Path(run_dir)
    rng = np.random.default_rng(seed + 1)
    task_ids = [f"task{i:04d}" for i in range(40)]
    (path / "trajectories").mkdir(parents=True, exist_ok=True)
    mon = Monitor(path, MonitorConfig(console=False))
    try:
        for step, metrics in synthetic_run(seed, steps, fault=fault, fault_step=fault_step):
            mon.observe(step, metrics)
            rows: dict[str, list[object]] = {k: [] for k in _TRAJ_COLUMNS}
            hacking = fault == "hacking" and step >= fault_step
            for t in range(tasks_per_step):
                task = task_ids[int(rng.integers(0, len(task_ids)))]
                for s in range(samples):
                    flagged = hacking and task in task_ids[:5] and rng.random() < 0.7
                    err = rng.random() < metrics["env/error_rate"]
                    outcome = float(rng.random() < metrics["reward/mean"])
                    rows["step"].append(step)
                    rows["task_id"].append(task)
                    rows["domain"].append(DOMAINS[t % 2])
                    rows["group_id"].append(f"{step}-{t}")
                    rows["sample_index"].append(s)
                    rows["policy_version"].append(step)
                    rows["reward"].append(None if err else outcome)
                    rows["outcome"].append(None if err else outcome)
                    rows["advantage"].append(None if err else outcome - 0.5)
                    rows["flags"].append(["test_tampering"] if flagged else [])
                    rows["flag_evidence"].append(
                        ["wrote conftest.py that skips every test"] if flagged else []
                    )
                    rows["error_kind"].append("timeout" if err else None)
                    rows["completion"].append("def solve(x):\n    return x  # synthetic")
                    if flagged:
                        mon.record_flagged(step, task, ["test_tampering"], ["wrote conftest.py"])
            pq.write_table(pa.table(rows), path / "trajectories" / f"step_{step}.parquet")
            if step and step % 20 == 0:
                mon.record_regressions(
                    step, task_ids[step // 20 : step // 20 + 2], "eval_failure", "pass@1=0"
                )
    finally:
        mon.close()
    return path


_TRAJ_COLUMNS = (
    "step",
    "task_id",
    "domain",
    "group_id",
    "sample_index",
    "policy_version",
    "reward",
    "outcome",
    "advantage",
    "flags",
    "flag_evidence",
    "error_kind",
    "completion",
)
