"""The run directory: resolved config, metrics, trajectories, checkpoints, alerts.

```
runs/<name>/config.yaml  metrics.jsonl  trajectories/step_N.parquet  checkpoints/step_N/  alerts.jsonl
             evaluations/eval_step_N.parquet  evaluations/eval_sampled_step_N.parquet
```
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trialground.monitor.sinks.jsonl import read_metrics
from trialground.orchestrator.run_config import RunConfig, dump_config
from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored

EVALUATIONS = "evaluations"  # held-out episodes, apart from trajectories/ (what training saw)
TRAJECTORY_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("group_id", pa.string()),
        ("sample_index", pa.int64()),
        ("policy_version", pa.int64()),
        ("reward", pa.float64()),
        ("outcome", pa.float64()),
        ("advantage", pa.float64()),
        ("excluded", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("flag_evidence", pa.list_(pa.string())),
        ("error_boundary", pa.string()),
        ("error_kind", pa.string()),
        ("error_message", pa.string()),
        ("finish_reason", pa.string()),
        ("truncated", pa.bool_()),
        ("completion", pa.string()),
        ("completion_tokens", pa.int64()),
        ("timings", pa.string()),
        ("workspace_digest", pa.string()),
        ("turns", pa.int64()),
        ("visible_checks", pa.string()),
        ("visible_checks_changed", pa.bool_()),
        # What training used, turn by turn (`Trajectory.turns`): each turn's role (prompt, policy, env), its
        # token ids as sampled or rendered, the sampler's logprobs (policy turns; empty for the others) and
        # the policy version that sampled it (policy turns; null for the others). The loss mask of the
        # completion (`Trajectory.completion`: 1 for policy tokens) is `loss_mask`.
        ("turn_roles", pa.list_(pa.string())),
        ("turn_token_ids", pa.list_(pa.list_(pa.int32()))),
        ("turn_logprobs", pa.list_(pa.list_(pa.float32()))),
        ("turn_versions", pa.list_(pa.int64())),
        ("loss_mask", pa.list_(pa.int8())),
    ]
)


class RunDir:
    """Owns the files of one run. Creating it writes `config.yaml` and an empty `alerts.jsonl`."""

    def __init__(self, config: RunConfig, *, resume: bool = False) -> None:
        self.path = config.run_dir
        if self.path.exists() and not resume and any(self.path.iterdir()):
            from trialground.orchestrator.preflight import occupied

            raise FileExistsError(occupied(self.path))
        self.created = not self.path.exists()
        (self.path / "trajectories").mkdir(parents=True, exist_ok=True)
        (self.path / "checkpoints").mkdir(parents=True, exist_ok=True)
        (self.path / "config.yaml").write_text(dump_config(config))
        (self.path / "alerts.jsonl").touch()

    def discard(self) -> None:
        """Remove a run directory this object created, after a start that failed before its first step,
        so the same command can be run again."""
        if self.created and not any((self.path / "checkpoints").iterdir()):
            shutil.rmtree(self.path, ignore_errors=True)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def checkpoint_dir(self, step: int) -> Path:
        return self.path / "checkpoints" / f"step_{step}"

    def truncate_after(self, step: int) -> None:
        """On resume, forget what a killed run wrote after its last checkpoint, so nothing repeats."""
        if self.metrics_path.exists():  # a half-written last line is dropped, not a crash
            kept = [row for row in read_metrics(self.metrics_path) if row["step"] < step]
            self.metrics_path.write_text("".join(json.dumps(row) + "\n" for row in kept))
        for f in (self.path / "trajectories").glob("step_*.parquet"):
            if int(f.stem.split("_")[1]) >= step:
                f.unlink()
        for f in (self.path / EVALUATIONS).glob("*_step_*.parquet"):
            if int(f.stem.rsplit("_", 1)[1]) >= step:
                f.unlink()

    def write_step(
        self,
        step: int,
        batch: Sequence[Scored],
        texts: Sequence[str],
        domains: Mapping[str, str],
        *,
        evaluation: str | None = None,
    ) -> Path:
        """All of a step's trajectories (trained or left out, `excluded` says why), with the advantage each
        was given; `texts[i]` is record i's decoded completion, `domains` maps task ids to domains. With
        `evaluation` (a metric prefix: `eval`, `eval_sampled`), the held-out episodes of that evaluation at
        this step, to `evaluations/{evaluation}_step_{step}.parquet` (no advantage)."""
        if evaluation is None:
            path = self.path / "trajectories" / f"step_{step}.parquet"
        else:
            path = self.path / EVALUATIONS / f"{evaluation}_step_{step}.parquet"
            path.parent.mkdir(exist_ok=True)
        return write_episodes(path, step, batch, texts, domains)


def evaluation_records(
    trajectories: Sequence[Trajectory], decode: Callable[..., str]
) -> tuple[list[Scored], list[str]]:
    """Held-out episodes as `write_episodes` takes them: each with its reward and no advantage, and its
    completion decoded by `decode` (the policy tokenizer's)."""
    texts = [decode(t.completion()[0], skip_special_tokens=True) for t in trajectories]
    records = [Scored(t, None if t.reward is None else t.reward.total, None) for t in trajectories]
    return records, texts


def write_episodes(
    path: Path, step: int, batch: Sequence[Scored], texts: Sequence[str], domains: Mapping[str, str]
) -> Path:
    """Episodes as one parquet file of `TRAJECTORY_SCHEMA` rows (the run directory's trajectories and
    evaluations, `trialground eval --episodes`); `texts[i]` is record i's decoded completion."""
    rows: dict[str, list[object]] = {name: [] for name in TRAJECTORY_SCHEMA.names}
    for rec, text in zip(batch, texts, strict=True):
        traj, adv, domain = rec.trajectory, rec.advantage, domains.get(rec.trajectory.task_id, "unknown")
        rows["excluded"].append(rec.excluded)
        ids, mask, _ = traj.completion()
        reward = traj.reward
        rows["step"].append(step)
        rows["task_id"].append(traj.task_id)
        rows["domain"].append(domain)
        rows["group_id"].append(traj.group_id)
        rows["sample_index"].append(traj.sample_index)
        rows["policy_version"].append(traj.policy_version)
        rows["reward"].append(None if reward is None else reward.total)
        rows["outcome"].append(None if reward is None else reward.outcome)
        rows["advantage"].append(adv)
        rows["flags"].append([f.name for f in reward.flags] if reward else [])
        rows["flag_evidence"].append([f.evidence for f in reward.flags] if reward else [])
        rows["error_boundary"].append(traj.error.boundary if traj.error else None)
        rows["error_kind"].append(traj.error.kind if traj.error else None)
        rows["error_message"].append(traj.error.message if traj.error else None)
        rows["finish_reason"].append(traj.finish_reason)
        rows["truncated"].append(traj.truncated)
        rows["completion"].append(text)
        rows["completion_tokens"].append(len(ids))
        rows["timings"].append(json.dumps(traj.timings, sort_keys=True))
        rows["workspace_digest"].append(traj.workspace_digest)
        rows["turns"].append(sum(turn.role == "policy" for turn in traj.turns))
        hashes = traj.end.visible_checks if traj.end is not None else None
        rows["visible_checks"].append(hashes.model_dump_json() if hashes is not None else None)
        rows["visible_checks_changed"].append(traj.visible_checks_changed)
        rows["turn_roles"].append([turn.role for turn in traj.turns])
        rows["turn_token_ids"].append([list(turn.token_ids) for turn in traj.turns])
        rows["turn_logprobs"].append([list(turn.logprobs) for turn in traj.turns])
        rows["turn_versions"].append([turn.version for turn in traj.turns])
        rows["loss_mask"].append(mask)
    pq.write_table(pa.Table.from_pydict(rows, schema=TRAJECTORY_SCHEMA), path)
    return path
