"""Recipe test: a few GRPO steps of the bundled tiny model on the codegen family, graded in real bubblewrap
sandboxes, with fixed seeds; rewards and losses must equal the stored values in recipe_expected.json.

Regenerate the stored values (after an intended change, e.g. a retrained tiny model) with
    .venv/bin/python tests/train/test_recipe.py --write
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs the [train] extra")

import torch

from trialground.envs.single_turn import SingleTurnEnv
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.hf import HFPolicy
from trialground.policy.tiny import tiny_model_dir
from trialground.rollout.agent import rollout_group
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.tasks.codegen import generate_codegen_tasks
from trialground.train.advantages import compute_advantages, with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer
from trialground.verify.grader import Grader

EXPECTED = Path(__file__).with_name("recipe_expected.json")
STEPS, TASKS, K = 3, 4, 4


def model_fingerprint() -> str:
    weights = tiny_model_dir() / "model.safetensors"
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:16] if weights.is_file() else "missing"


async def run_recipe() -> dict[str, Any]:
    torch.manual_seed(0)
    policy = HFPolicy(PolicyConfig(model="tiny"))
    trainer = Trainer(policy.model, TrainerConfig(lr=3e-4, micro_batch_size=8), policy.tokenizer.pad_token_id)
    grader = Grader(SandboxConfig(limits=Limits(wall_s=5, cpu_s=5, memory_mb=256, pids=32)))
    tasks = generate_codegen_tasks(STEPS * TASKS, seed=11, split="train")
    out: dict[str, Any] = {"steps": []}
    try:
        for step in range(STEPS):
            batch = tasks[step * TASKS : (step + 1) * TASKS]
            groups = await asyncio.gather(
                *(
                    # one explicit seed per group: generation order across threads cannot change samples
                    rollout_group(
                        policy,
                        lambda: SingleTurnEnv(grader),
                        task,
                        K,
                        params=SamplingParams(temperature=1.0, max_new_tokens=48, seed=1000 * step + i),
                        group_id=f"{step}-{i}",
                        max_context_tokens=512,
                    )
                    for i, task in enumerate(batch)
                )
            )
            flat = [t for g in groups for t in g]
            errors = [t.error for t in flat if t.error is not None]
            assert not errors, errors
            m = trainer.step(with_advantages(flat, compute_advantages(flat, "grpo")))
            policy.load_weights(trainer.state_dict(), trainer.version)
            out["steps"].append(
                {
                    "rewards": [t.reward.total if t.reward else None for t in flat],
                    "completion_tokens": [len(t.completion()[0]) for t in flat],
                    "loss": m.get("train/loss", 0.0),
                    "grad_norm": m.get("train/grad_norm", 0.0),
                    "clip_frac": m.get("train/clip_frac", 0.0),
                }
            )
    finally:
        await grader.close()
    return out


def _run_single_threaded() -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bit-stable float reductions, whatever the machine
    try:
        return asyncio.run(run_recipe())
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_recipe_matches_stored_values() -> None:
    if model_fingerprint() == "missing":
        pytest.skip("the bundled tiny model is not built (scripts/pretrain_tiny.py)")
    stored = json.loads(EXPECTED.read_text())
    assert stored["model"] == model_fingerprint(), (
        "the bundled tiny model changed since the stored values were made; if intended, regenerate: "
        ".venv/bin/python tests/train/test_recipe.py --write"
    )
    got = _run_single_threaded()
    for i, (g, s) in enumerate(zip(got["steps"], stored["steps"], strict=True)):
        assert g["rewards"] == s["rewards"], f"step {i}"
        assert g["completion_tokens"] == s["completion_tokens"], f"step {i}"
        for key in ("loss", "grad_norm", "clip_frac"):
            assert g[key] == pytest.approx(s[key], rel=1e-4, abs=1e-6), f"step {i} {key}"
    # the run learned something to check: not every reward is the same
    assert len({r for s in stored["steps"] for r in s["rewards"]}) > 1


if __name__ == "__main__" and "--write" in sys.argv:
    result = _run_single_threaded()
    EXPECTED.write_text(json.dumps({"model": model_fingerprint(), **result}, indent=1) + "\n")
    print(f"wrote {EXPECTED}")
