"""Data-parallel training: the batch split, and two gloo ranks (torchrun, Ray) against one process."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from dist_helpers import PAD, batches, save_model, trainer_config
from train_helpers import traj

from trialground.errors import ConfigError
from trialground.orchestrator.run_config import load_config
from trialground.policy.backends.hf.hf import load_model
from trialground.policy.config import PolicyConfig
from trialground.train.advantages import with_advantages
from trialground.train.distributed import split_batch
from trialground.train.trainer import Trainer

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def _group(name: str, sizes: list[int]) -> list:  # type: ignore[type-arg]
    return [traj([1, 2], [("policy", [3] * n, [-1.0] * n)], group=name, index=i) for i, n in enumerate(sizes)]


def test_split_keeps_groups_whole_and_balances_tokens() -> None:
    trajs = _group("a", [10, 10]) + _group("b", [1, 1]) + _group("c", [4, 4]) + _group("d", [5, 4])
    shares = split_batch(with_advantages(trajs, [1.0] * len(trajs)), 2)
    groups = [sorted({r.trajectory.group_id for r in share}) for share in shares]
    assert groups == [["a", "b"], ["c", "d"]]  # 24 + 6 tokens against 12 + 13 (prompt included)
    assert sum(len(s) for s in shares) == len(trajs)


def test_split_leaves_out_untrainable_and_splits_groups_when_they_are_fewer_than_ranks() -> None:
    trajs = [*_group("a", [3, 5, 7]), traj([1], [("policy", [2], [-1.0])], group="a", error=True)]
    records = with_advantages(trajs, [1.0, None, 0.5, 1.0])
    records[2] = replace(records[2], excluded="filtered")
    shares = split_batch(records, 2)
    kept = [r.trajectory.completion()[0] for share in shares for r in share]
    assert sorted(len(k) for k in kept) == [3]  # no advantage / filtered / an error: trained nowhere
    records = with_advantages(trajs, [1.0, 2.0, 0.5, 1.0])
    shares = split_batch(records, 2)
    assert [len(s) for s in shares] == [1, 2]  # one group, two ranks: one by one, 9 tokens / 7 + 5
    assert split_batch([], 3) == [[], [], []]


def test_data_parallel_needs_ray_or_torchrun(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cluster: ray"):
        load_config(None, ["trainer.data_parallel=2"])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model(tmp_path_factory.mktemp("dist") / "model")


@pytest.fixture(scope="module")
def one_process(model_dir: Path) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    """The reference: the same trainer and batches in this one process."""
    model = load_model(PolicyConfig(model=str(model_dir), cpu_threads=1)).eval()
    trainer = Trainer(model, trainer_config(), pad_id=PAD, temperature=1.0)
    metrics = [trainer.step(batch) for batch in batches(model_dir)]
    return trainer.state_dict(), metrics


def _compare(out: Path, one_process: tuple[dict[str, torch.Tensor], list[dict[str, float]]]) -> None:
    want, want_metrics = one_process
    got = torch.load(out / "rank0.pt", weights_only=True)
    start = load_model(PolicyConfig(model=str(out.parent / "model"), cpu_threads=1)).state_dict()
    assert got.keys() == want.keys()
    moved = max((want[k] - start[k]).abs().max().item() for k in want)
    assert moved > 1e-2  # the steps moved the weights, so equal weights mean equal updates
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=5e-5, msg=k)  # Adam: 4e-2 steps
    got_metrics = json.loads((out / "metrics.json").read_text())
    assert all(m["train/grad_norm"] > 0.1 for m in want_metrics)  # both steps train (none all clipped)
    for g, w in zip(got_metrics, want_metrics, strict=True):
        for key in ("train/loss", "train/tokens", "train/sequences", "train/active_sequences",
                    "train/grad_norm", "train/entropy", "train/ratio_mean", "train/pg_loss",
                    "train/sampler_logprob_diff", "train/clip_frac"):  # fmt: skip
            assert g[key] == pytest.approx(w[key], rel=1e-5, abs=1e-7), key


@pytest.mark.slow
def test_two_gloo_ranks_under_torchrun_step_like_one_process(
    model_dir: Path, one_process: tuple[dict[str, torch.Tensor], list[dict[str, float]]]
) -> None:
    out = model_dir.parent / "torchrun"
    out.mkdir()
    proc = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(HERE / "dist_rank.py"),
         str(model_dir), str(out)],
        cwd=HERE, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    _compare(out, one_process)
    rank0, rank1 = (torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    for k in rank0:  # the same all-reduced gradients: the replicas stay identical
        assert torch.equal(rank0[k], rank1[k]), k


@pytest.mark.slow
@pytest.mark.ray
def test_two_gloo_ranks_through_ray_step_like_one_process(
    model_dir: Path, one_process: tuple[dict[str, torch.Tensor], list[dict[str, float]]]
) -> None:
    pytest.importorskip("ray")
    out = model_dir.parent / "ray"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, str(HERE / "dist_rank.py"), str(model_dir), str(out), "--ray"],
        cwd=HERE, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    _compare(out, one_process)
