"""The run directory's resume bookkeeping: a killed run's partial writes after the checkpoint are dropped."""

from __future__ import annotations

import json
from pathlib import Path

from trialground.orchestrator.run_config import load_config
from trialground.orchestrator.rundir import RunDir


def test_truncate_after_drops_later_steps_and_a_half_written_line(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path}", "name=r"])
    run = RunDir(cfg)
    lines = [json.dumps({"step": s, "reward/mean": s / 10}) for s in range(4)]
    run.metrics_path.write_text("\n".join(lines) + '\n{"step": 4, "reward/me')  # killed mid-write
    for s in (1, 2, 3):
        (run.path / "trajectories" / f"step_{s}.parquet").write_bytes(b"x")
    (run.path / "evaluations").mkdir()
    for name in ("eval_step_0", "eval_sampled_step_0", "eval_step_2", "eval_sampled_step_2"):
        (run.path / "evaluations" / f"{name}.parquet").write_bytes(b"x")
    resumed = RunDir(cfg, resume=True)
    resumed.truncate_after(2)
    rows = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert sorted(p.name for p in (run.path / "trajectories").iterdir()) == ["step_1.parquet"]
    kept = sorted(p.name for p in (run.path / "evaluations").iterdir())
    assert kept == ["eval_sampled_step_0.parquet", "eval_step_0.parquet"]
