"""The trainer's dtype follows `policy.dtype` on every rank: bf16 weights stepped through fp32 masters that
checkpoints keep, and two gloo ranks under torchrun training a bf16 model as one run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dist_helpers import PAD, batches, run_config, save_model, trainer_config
from train_helpers import sequence_logprobs, tiny_llama, traj

from trialground.orchestrator.wiring import trainer_module
from trialground.policy.backends.hf.hf import load_model
from trialground.train.advantages import with_advantages
from trialground.train.checkpoint import load_checkpoint, save_checkpoint
from trialground.train.config import TrainerConfig
from trialground.train.precision import trainer_dtype
from trialground.train.trainer import Trainer

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")
SPECS = [([1, 2, 3], [4, 5, 6, 7], 1.0), ([1, 2, 3], [8, 9], -1.0), ([5, 6], [10, 11, 12], 0.5)]


def _batch(model: torch.nn.Module) -> list:  # type: ignore[type-arg]
    trajs = [
        traj(p, [("policy", c, sequence_logprobs(model, p + c, len(p)))], group="g", index=i)  # type: ignore[arg-type]
        for i, (p, c, _) in enumerate(SPECS)
    ]
    return with_advantages(trajs, [s[2] for s in SPECS])


def test_the_trained_dtype_is_the_configured_one() -> None:
    assert trainer_dtype("bfloat16") == torch.bfloat16
    assert trainer_dtype("float32") == torch.float32
    assert trainer_dtype("float16") == torch.float32  # no loss scaling: fp16 gradients would overflow
    with pytest.raises(ValueError, match=r"policy\.dtype 'int8'"):
        trainer_dtype("int8")


def test_bf16_weights_are_stepped_through_fp32_masters_close_to_an_fp32_step() -> None:
    model = tiny_llama().to(torch.bfloat16)
    batch = _batch(model)
    reference = tiny_llama().to(torch.bfloat16).float()  # the same starting values, trained in fp32
    config = TrainerConfig(lr=1e-3)
    bf16, fp32 = Trainer(model, config, PAD), Trainer(reference, config, PAD)
    assert bf16.masters is not None and fp32.masters is None
    start = [p.detach().float().clone() for p in model.parameters()]
    bf16.step(batch)
    fp32.step(batch)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())  # no fp32 copy of the model
    masters = bf16.masters.state()
    assert all(m.dtype == torch.float32 for m in masters)
    moments = [s["exp_avg"] for s in bf16.optimizer.state.values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)
    off, total = 0, 0
    for p, m, want, s in zip(model.parameters(), masters, reference.parameters(), start, strict=True):
        assert torch.equal(p, m.to(torch.bfloat16))  # the weight is its master, rounded
        assert (m - s).abs().max() > 5e-4  # AdamW's first step is ~lr: the master keeps it
        # bf16 matmuls round the gradient; Adam's first step is ~lr * sign(grad) whatever its size, so a
        # near-zero gradient component of the other sign moves its weight 2 lr the other way
        off += int(((m - want.detach()).abs() > 2e-4).sum())
        total += m.numel()
    assert off <= 0.01 * total, (off, total)


def test_a_bf16_checkpoint_resumes_from_its_masters(tmp_path: Path) -> None:
    def trainer() -> Trainer:
        return Trainer(tiny_llama().to(torch.bfloat16), TrainerConfig(lr=1e-3), PAD)

    first = trainer()
    batch = _batch(first.model)
    first.step(batch)
    save_checkpoint(tmp_path / "ckpt", first, step=1, export_hf=False)
    first.step(batch)
    resumed = trainer()
    load_checkpoint(tmp_path / "ckpt", resumed)
    resumed.step(batch)
    assert first.masters is not None and resumed.masters is not None
    for a, b in zip(first.masters.state(), resumed.masters.state(), strict=True):
        assert torch.equal(a, b)  # exact: the masters came back, not the rounded weights


def test_every_rank_builds_its_trainer_module_in_the_same_dtype(tmp_path: Path) -> None:
    model_dir = save_model(tmp_path / "model")
    config = run_config(model_dir, dtype="bfloat16")
    sampler = load_model(config.policy)
    assert trainer_module(config, sampler) is sampler  # sync, same dtype: shared, no copy
    other = trainer_module(config, None)  # what ranks > 0 build
    assert {p.dtype for p in other.parameters()} == {torch.bfloat16}
    fp16 = run_config(model_dir, dtype="float16")
    copied = trainer_module(fp16, load_model(fp16.policy))
    other = trainer_module(fp16, None)
    assert {p.dtype for p in copied.parameters()} == {p.dtype for p in other.parameters()}
    assert {p.dtype for p in copied.parameters()} == {torch.float32}


@pytest.mark.slow
def test_two_gloo_ranks_train_a_bf16_policy_under_torchrun(tmp_path: Path) -> None:
    """The bf16 crash: rank 0 trained an fp32 copy while rank 1 loaded bf16, and DDP's first broadcast
    failed. Now both train the bf16 module through fp32 masters, and end with the same weights."""
    model_dir = save_model(tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(HERE / "dist_bf16_rank.py"),
         str(model_dir), str(out)],
        cwd=HERE, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rank0, rank1 = (torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    for k, v in rank0["weights"].items():
        assert v.dtype == torch.bfloat16, k
        assert torch.equal(v, rank1["weights"][k]), k
    for a, b in zip(rank0["masters"], rank1["masters"], strict=True):
        assert torch.equal(a, b)
    # one process on the same batch, from the same bf16 weights: the same step up to summation order
    one = Trainer(load_model(run_config(model_dir, dtype="bfloat16").policy).eval(), trainer_config(), PAD)
    want = one.step(batches(model_dir)[0])
    got = json.loads((out / "metrics.json").read_text())
    assert got["train/sequences"] == want["train/sequences"] == 8
    assert got["train/grad_norm"] == pytest.approx(want["train/grad_norm"], rel=2e-2)
    assert one.masters is not None
    for a, b in zip(rank0["masters"], one.masters.state(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-2)
