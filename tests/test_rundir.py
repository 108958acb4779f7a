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


def test_trajectory_files_hold_every_turn_as_training_used_it(tmp_path: Path) -> None:
    """Each row keeps the turns' ids, the sampler's logprobs, the version that sampled each policy turn and
    the loss mask: the trainer's samples can be rebuilt from the file alone."""
    import pyarrow.parquet as pq

    from trialground.orchestrator.rundir import write_episodes
    from trialground.rollout.trajectory import Trajectory, Turn
    from trialground.train.advantages import Scored
    from trialground.train.trainer import build_samples

    traj = Trajectory(
        task_id="t",
        group_id="g",
        sample_index=0,
        policy_version=3,
        turns=(
            Turn(role="prompt", token_ids=(2, 10, 11)),
            Turn(role="policy", token_ids=(12, 13), logprobs=(-0.5, -0.25), version=3),
            Turn(role="env", token_ids=(14, 15, 16)),
            Turn(role="policy", token_ids=(17, 1), logprobs=(-1.5, -0.125), version=4),
        ),
    )
    path = write_episodes(tmp_path / "s.parquet", 1, [Scored(traj, 1.0, 0.5)], ["x"], {})
    (row,) = pq.read_table(path).to_pylist()
    assert row["turn_roles"] == ["prompt", "policy", "env", "policy"]
    assert row["turn_token_ids"] == [[2, 10, 11], [12, 13], [14, 15, 16], [17, 1]]
    assert row["turn_logprobs"] == [[], [-0.5, -0.25], [], [-1.5, -0.125]]
    assert row["turn_versions"] == [None, 3, None, 4]
    assert row["loss_mask"] == [1, 1, 0, 0, 0, 1, 1]
    (sample,) = build_samples([Scored(traj, 1.0, 0.5)])
    assert sample.ids == [i for turn in row["turn_token_ids"] for i in turn]
    assert sample.mask[sample.prompt_len - 1 :] == row["loss_mask"]
