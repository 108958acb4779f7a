"""benchmarks/train_vs_trl.py measures a real training step on our side: the rollouts go through the reward
seam, so every sequence enters the loss (`--full-batch`), rewards are real numbers, and the step's time is
split into generation, grading and update. A benchmark whose trainer trains nothing would compare TRL's
full step with our generation alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "train_vs_trl.py"), *args],
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_our_side_trains_every_sequence_and_splits_its_time(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = _bench(
        *("--steps", "2", "--tasks", "2", "--k", "4", "--eval-tasks", "2", "--max-new-tokens", "24"),
        *("--only", "ours", "--full-batch", "--json", str(out)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["results"]
    assert row["system"] == "trialground"
    assert row["trained_sequences"] == 2 * 2 * 4
    split = row["split_s"]
    assert split["update_s"] > 0 and split["generation_s"] > 0 and split["reward_s"] > 0
    parts = sum(v for k, v in split.items() if k != "rest_s")
    assert abs(parts + split["rest_s"] - row["seconds"]) < 0.2
    assert "where the" in proc.stdout


def test_micro_batches_keep_one_generation_and_one_step_per_step_in_both(tmp_path: Path) -> None:
    """`--micro-batch`: both systems accumulate gradients over micro-batches; TRL still generates and
    grades the step's whole batch once per optimiser step, as ours does."""
    out = tmp_path / "r.json"
    shape = ("--steps", "2", "--tasks", "2", "--k", "4", "--eval-tasks", "2", "--max-new-tokens", "16")
    bad = _bench(*shape, "--micro-batch", "3", timeout=600)
    assert bad.returncode != 0 and "--micro-batch 3 must divide the step's 8 sequences" in bad.stderr
    proc = _bench(*shape, "--micro-batch", "4", "--full-batch", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {row["system"]: row for row in json.loads(out.read_text())["results"]}
    assert set(rows) == {"trl", "trialground"}
    assert rows["trialground"]["trained_sequences"] == 2 * 2 * 4
    assert rows["trl"]["reward_calls"] == rows["trialground"]["reward_calls"] == 2
