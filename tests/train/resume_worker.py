"""Run by test_checkpoint.py in fresh processes: train, save, resume. Not a test module.

Each step draws its batch from the global RNGs (torch for tokens, numpy and `random` for rewards), so an
exact resume needs model, optimiser *and* RNG states restored.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch
from train_helpers import PAD, VOCAB, sequence_logprobs, tiny_llama, traj

from trialground.train.advantages import compute_advantages, with_advantages
from trialground.train.checkpoint import checkpoint_path, latest_checkpoint, load_checkpoint, save_checkpoint
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer


def draw_batch(model: torch.nn.Module, step: int) -> list:
    out = []
    for group in range(2):
        prompt = torch.randint(1, VOCAB, (3,)).tolist()
        for i in range(3):
            completion = torch.randint(1, VOCAB, (int(np.random.randint(1, 5)),)).tolist()
            lp = sequence_logprobs(model, prompt + completion, len(prompt))  # type: ignore[arg-type]
            reward = float(random.random() < 0.5)
            out.append(
                traj(prompt, [("policy", completion, lp)], reward=reward, group=f"{step}-{group}", index=i)
            )
    return out


def run(mode: str, run_dir: str, lora: int) -> dict:
    """mode: full (3 steps), first (2 steps, then save), resume (load the latest, finish step 3)."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = tiny_llama()
    trainer = Trainer(model, TrainerConfig(lr=1e-2, micro_batch_size=4, lora_rank=lora, lora_alpha=4), PAD)
    start, seen = 0, []
    if mode == "resume":
        path = latest_checkpoint(run_dir)
        assert path is not None
        loaded = load_checkpoint(path, trainer)
        start, seen = loaded.step, loaded.extra["seen"]
    stop = 2 if mode == "first" else 3
    for step in range(start, stop):
        batch = draw_batch(model, step)
        seen.append(batch[0].turns[1].token_ids)
        trainer.step(with_advantages(batch, compute_advantages(batch, "grpo")))
        if mode == "first" and step + 1 == 2:
            save_checkpoint(checkpoint_path(run_dir, step + 1), trainer, step=step + 1, extra={"seen": seen})
    return {"params": trainer.model.state_dict(), "version": trainer.version, "seen": seen}


def main(phase: str, root: str, out: str) -> None:
    """phase "before": the uninterrupted runs and the interrupted ones; phase "after": the resumes.
    Both LoRA settings run in each process (fewer interpreter start-ups)."""
    torch.set_num_threads(1)
    results = {}
    for lora in (0, 2):
        modes = ("full", "first") if phase == "before" else ("resume",)
        for mode in modes:
            results[f"{mode}-{lora}"] = run(mode, f"{root}/lora{lora}", lora)
    torch.save(results, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
