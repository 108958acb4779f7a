"""Shared by the data-parallel tests and their rank script: a saved tiny model, a config, two batches."""

from __future__ import annotations

from pathlib import Path

from train_helpers import PAD, sequence_logprobs, tiny_llama, traj

from trialground.orchestrator.run_config import RunConfig
from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored, with_advantages
from trialground.train.config import TrainerConfig

# Two micro-batches per rank and two epochs: accumulation under no_sync and one all-reduce per epoch.
# Recomputed old logprobs: the second batch (recorded by the starting model) still trains, not clipped.
TRAINER = {"lr": 0.01, "micro_batch_size": 2, "epochs": 2, "old_logprobs": "recompute"}

# (prompt, completion, advantage), four groups: both ranks get work in the first batch.
FIRST = [
    ([1, 2, 3], [4, 5, 6, 7], 1.0),
    ([1, 2, 3], [8, 9], -1.0),
    ([5, 6], [10, 11, 12], -0.5),
    ([5, 6], [13], 0.5),
    ([7, 8, 9, 10], [14, 15], 1.5),
    ([7, 8, 9, 10], [16, 17, 18, 19, 20], -1.5),
    ([11], [21, 22, 23], 0.25),
    ([11], [24], -0.25),
]
# One trajectory: one rank trains it, the other takes part in the all-reduce with nothing to train.
SECOND = [([2, 4, 6], [8, 10, 12, 14], 1.0)]


def save_model(path: Path) -> Path:
    tiny_llama(seed=0).save_pretrained(path)
    return path


def run_config(
    model_dir: Path, *, ray: bool = False, dtype: str = "float32", parallel: str = "ddp"
) -> RunConfig:
    data = {
        "policy": {"model": str(model_dir), "cpu_threads": 1, "dtype": dtype},
        "trainer": {**TRAINER, "parallel": parallel, **({"data_parallel": 2} if ray else {})},
        **({"cluster": "ray"} if ray else {}),
    }
    return RunConfig.model_validate(data)


def trainer_config() -> TrainerConfig:
    return TrainerConfig.model_validate(TRAINER)


def batches(model_dir: Path) -> list[list[Scored]]:
    """Both batches, with logprobs recorded by the starting model (the second is off-policy)."""
    from trialground.policy.backends.hf.hf import load_model
    from trialground.policy.config import PolicyConfig

    model = load_model(PolicyConfig(model=str(model_dir), cpu_threads=1)).eval()
    out: list[list[Scored]] = []
    for b, specs in enumerate([FIRST, SECOND]):
        trajs: list[Trajectory] = []
        advs: list[float | None] = []
        for i, (prompt, completion, adv) in enumerate(specs):
            lp = sequence_logprobs(model, prompt + completion, len(prompt))
            group = f"b{b}-p{prompt[0]}"
            trajs.append(traj(prompt, [("policy", completion, lp)], group=group, index=i))
            advs.append(adv)
        out.append(with_advantages(trajs, advs))
    return out


__all__ = ["PAD", "batches", "run_config", "save_model", "trainer_config"]
