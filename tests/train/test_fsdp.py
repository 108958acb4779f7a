"""FSDP2 sharded training (`trainer.parallel: fsdp`) on two gloo ranks under torchrun against one
process, and the weight iterator a sampler or a weight push reads the trained weights through."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dist_helpers import PAD, batches, save_model, trainer_config
from train_helpers import tiny_llama

from trialground.policy.backends.hf.hf import load_model
from trialground.policy.config import PolicyConfig
from trialground.train.config import TrainerConfig
from trialground.train.memory_model import ModelShape, TrainSetup, estimate
from trialground.train.trainer import Trainer
from trialground.train.weights import named_weights, weight_buckets

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_parallel_names_are_checked() -> None:
    assert TrainerConfig(parallel="fsdp", cpu_offload=True).parallel == "fsdp"
    with pytest.raises(ValueError, match=r"trainer\.parallel 'zero3'"):
        TrainerConfig(parallel="zero3")
    with pytest.raises(ValueError, match="cpu_offload needs"):
        TrainerConfig(cpu_offload=True)


def test_weight_buckets_are_bounded_and_cast() -> None:
    model = tiny_llama()
    buckets = list(weight_buckets(model, lora=False, dtype=torch.bfloat16, bucket_bytes=1024))
    assert len(buckets) > 3
    for bucket in buckets:
        assert len(bucket) == 1 or sum(t.numel() * t.element_size() for _, t in bucket) <= 1024
    got = {k: v for bucket in buckets for k, v in bucket}
    want = model.state_dict()
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k].to(torch.bfloat16)), k
    with pytest.raises(ValueError, match="bucket_bytes"):
        next(weight_buckets(model, lora=False, bucket_bytes=0))


def test_named_weights_merge_lora_as_peft_does() -> None:
    trainer = Trainer(tiny_llama(), TrainerConfig(lora_rank=2, lora_alpha=4), PAD)
    with torch.no_grad():  # adapters start with B = 0: make every delta non-zero
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    got = dict(named_weights(trainer.model, lora=True))
    want = copy.deepcopy(trainer.model).merge_and_unload().state_dict()  # type: ignore[operator]
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-6, msg=k)
    assert not torch.equal(got["model.layers.0.self_attn.q_proj.weight"], tiny_llama().state_dict()[
        "model.layers.0.self_attn.q_proj.weight"])  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model(tmp_path_factory.mktemp("fsdp") / "model")


def _torchrun(model_dir: Path, out: Path, *flags: str) -> None:
    out.mkdir()
    proc = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(HERE / "dist_fsdp_rank.py"),
         str(model_dir), str(out), *flags],
        cwd=HERE, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "rank 1/2 (fsdp): parameters" in proc.stderr  # each rank prints what it holds


@pytest.mark.slow
def test_two_fsdp_ranks_step_like_one_process_holding_half_the_state(model_dir: Path) -> None:
    out = model_dir.parent / "fp32"
    _torchrun(model_dir, out)
    one = Trainer(load_model(PolicyConfig(model=str(model_dir), cpu_threads=1)).eval(), trainer_config(), PAD)
    start = {k: v.clone() for k, v in one.state_dict().items()}
    want_metrics = one.step(batches(model_dir)[0])
    want = one.state_dict()
    got = torch.load(out / "weights.pt", weights_only=True)
    assert got.keys() == want.keys()
    assert max((want[k] - start[k]).abs().max().item() for k in want) > 1e-2  # the step moved the weights
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=5e-5, msg=k)
    got_metrics = json.loads((out / "metrics.json").read_text())
    for key in ("train/loss", "train/grad_norm", "train/tokens", "train/sequences", "train/entropy"):
        assert got_metrics[key] == pytest.approx(want_metrics[key], rel=1e-5, abs=1e-7), key
    # the checkpoint: every rank's shards, and a plain HF directory of the gathered weights
    ckpt = out / "ckpt"
    assert (ckpt / "sharded" / ".metadata").is_file() and not (ckpt / "model.pt").exists()
    exported = load_model(PolicyConfig(model=str(ckpt / "hf"), cpu_threads=1)).state_dict()
    for k in want:
        assert torch.equal(exported[k], got[k]), k
    resume = torch.load(out / "resume.pt", weights_only=True)
    for k, v in resume["straight"].items():  # resumed from the shards: the same next step, bit for bit
        assert torch.equal(resume["resumed"][k], v), k
    assert any(not torch.equal(resume["straight"][k], got[k]) for k in got)  # the second step moved them
    single = sum(one.state_bytes.values())
    shape = ModelShape.from_model_dir(model_dir)  # the memory model predicts both (docs/memory.md)
    # (up to AdamW's step counters, 4 bytes a tensor, which it leaves out)
    assert estimate(shape, TrainSetup()).state == pytest.approx(single, rel=1e-3)
    for r in (0, 1):
        held = json.loads((out / f"bytes{r}.json").read_text())
        assert held["grads"] > 0 and held["optimizer"] > 0
        assert sum(held.values()) <= 0.55 * single, (held, single)
        predicted = estimate(shape, TrainSetup(parallel="fsdp", world=2)).state
        assert sum(held.values()) == pytest.approx(predicted, rel=1e-3)


@pytest.mark.slow
def test_fsdp_with_bf16_compute_over_fp32_shards(model_dir: Path) -> None:
    """`policy.dtype: bfloat16`: all-gathers and matmuls in bf16, the shards and AdamW state in fp32."""
    out = model_dir.parent / "bf16"
    _torchrun(model_dir, out, "--bf16")
    got = torch.load(out / "weights.pt", weights_only=True)
    config = trainer_config().model_copy(update={"epochs": 1})
    one = Trainer(load_model(PolicyConfig(model=str(model_dir), cpu_threads=1)).eval(), config, PAD)
    start = {k: v.clone() for k, v in one.state_dict().items()}
    want_metrics = one.step(batches(model_dir)[0])
    want = one.state_dict()
    assert {t.dtype for t in got.values()} == {torch.float32}  # gathered from the fp32 shards
    # bf16 rounding of every matmul: the same update direction, not the same bits (Adam turns small
    # gradient differences into ~lr steps)
    moved = torch.cat([(got[k] - start[k]).flatten() for k in want])
    ref = torch.cat([(want[k] - start[k]).flatten() for k in want])
    assert float(torch.nn.functional.cosine_similarity(moved, ref, dim=0)) > 0.9
    got_metrics = json.loads((out / "metrics.json").read_text())
    assert got_metrics["train/grad_norm"] == pytest.approx(want_metrics["train/grad_norm"], rel=1e-2)
    held = json.loads((out / "bytes0.json").read_text())
    assert held["params"] == 4 * sum(p.numel() for p in one.model.parameters()) // 2  # fp32, half each
