"""Checkpoints: an interrupted run resumed in a fresh process equals the uninterrupted run bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import PAD, tiny_llama

from trialground.train.checkpoint import checkpoint_path, latest_checkpoint, load_checkpoint, save_checkpoint
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer

HERE = Path(__file__).parent


def _worker(phase: str, root: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, str(HERE / "resume_worker.py"), phase, str(root), str(out)],
        check=True,
        env=env,
        timeout=240,
    )
    return torch.load(out, weights_only=False)


@pytest.mark.slow
def test_resume_reproduces_uninterrupted_run(tmp_path: Path) -> None:
    """Train 2 steps + save; a fresh process loads and does step 3; equals 3 uninterrupted steps exactly
    (full fine-tuning and LoRA)."""
    before = _worker("before", tmp_path, tmp_path / "before.pt")
    after = _worker("after", tmp_path, tmp_path / "after.pt")
    for lora in (0, 2):
        full, first, resumed = before[f"full-{lora}"], before[f"first-{lora}"], after[f"resume-{lora}"]
        assert first["version"] == 2
        assert full["version"] == resumed["version"] == 3
        assert full["seen"] == resumed["seen"]  # the same data was drawn after the resume
        assert full["params"].keys() == resumed["params"].keys()
        for name, value in full["params"].items():
            assert torch.equal(value, resumed["params"][name]), f"lora={lora} {name}"
        # and the check can fail: two steps differ from three
        assert not all(torch.equal(v, first["params"][k]) for k, v in full["params"].items())


def test_save_layout_latest_and_mismatch(tmp_path: Path) -> None:
    trainer = Trainer(tiny_llama(), TrainerConfig(), PAD)
    assert latest_checkpoint(tmp_path) is None
    for step in (2, 10):
        save_checkpoint(checkpoint_path(tmp_path, step), trainer, step=step, extra={"pool": {"n": step}})
    (tmp_path / "checkpoints" / "step_99.tmp").mkdir()  # a save that was killed: ignored
    (tmp_path / "checkpoints" / "step_50").mkdir()  # no meta.json: incomplete, ignored
    latest = latest_checkpoint(tmp_path)
    assert latest == tmp_path / "checkpoints" / "step_10"
    files = {p.name for p in latest.iterdir()}
    assert {"meta.json", "model.pt", "optimizer.pt", "rng.pt", "extra.pt"} <= files
    loaded = load_checkpoint(latest, Trainer(tiny_llama(seed=5), TrainerConfig(), PAD))
    assert loaded.step == 10 and loaded.extra == {"pool": {"n": 10}}
    with pytest.raises(ValueError, match="lora_rank"):
        load_checkpoint(latest, Trainer(tiny_llama(), TrainerConfig(lora_rank=2), PAD))
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "checkpoints" / "step_50", trainer)


def test_export_pretrained_loads_with_transformers(tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    trainer = Trainer(tiny_llama(), TrainerConfig(lora_rank=2), PAD)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)  # a non-zero adapter, as after training
    path = save_checkpoint(checkpoint_path(tmp_path, 1), trainer, step=1, export_hf=True)
    loaded = LlamaForCausalLM.from_pretrained(path / "hf")
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=x).logits, trainer.model(input_ids=x).logits, atol=1e-5)
