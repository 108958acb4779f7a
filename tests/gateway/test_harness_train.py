"""`trialground train examples/harness.yaml`: the outside ReAct program (the `openai` SDK, no trialground
imports) drives the bundled agent policy through the gateway for a few real training steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap"),
]
ROOT = Path(__file__).resolve().parents[2]
VENV = str(Path(sys.executable).parent.parent)


@pytest.mark.timeout(900)
def test_the_harness_recipe_trains_through_the_outside_program(tmp_path: Path) -> None:
    sets = {
        "env.harness_dir": str(ROOT / "examples" / "harness"),
        "env.harness_venv": VENV,
        "loop.steps": "2",
        "loop.batch_tasks": "2",
        "loop.samples_per_task": "2",
        "loop.probe_interval": "0",
        "tasks.num_train": "40",
        "tasks.num_eval": "2",
        "output_dir": str(tmp_path),
        "name": "harness",
    }
    args = [arg for k, v in sets.items() for arg in ("--set", f"{k}={v}")]
    out = subprocess.run(
        [sys.executable, "-m", "trialground", "train", str(ROOT / "examples" / "harness.yaml"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=840,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "harness"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/tokens" in r]
    assert [r["step"] for r in trained] == [1, 2]
    assert all(r["rollout/trajectories"] == 4 and r["train/tokens"] > 0 for r in trained)
    # the program called the model several times per episode, each call one policy turn of one trajectory
    assert all(r["rollout/turns_mean"] > 1.0 for r in trained), [r["rollout/turns_mean"] for r in trained]
    assert all(r["env/error_rate"] < 1.0 for r in trained)
    table = pq.read_table(run / "trajectories" / "step_1.parquet").to_pylist()
    assert len(table) == 4 and all(row["completion_tokens"] > 0 for row in table)
    assert all(row["finish_reason"] in ("exited", "exited_nonzero", "time_limit") for row in table), table
