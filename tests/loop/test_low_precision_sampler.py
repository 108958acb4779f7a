"""A bf16 policy (`policy.dtype: bfloat16`) with `trainer.mixed_precision: bf16`: in sync mode the trainer
updates the sampler's own bf16 module through fp32 masters (no second copy of the model); in async mode it
owns a bf16 copy and pushes it after each step."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import torch

from trialground.orchestrator.loop import run
from trialground.orchestrator.run_config import load_config
from trialground.orchestrator.wiring import build, sync_weights

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(
        ROOT / "examples" / "quickstart.yaml",
        [
            "policy.dtype=bfloat16",
            "trainer.mixed_precision=bf16",
            "tasks.num_train=16",
            "tasks.num_eval=4",
            "loop.batch_tasks=2",
            "loop.samples_per_task=4",
            "loop.eval_interval=0",
            "loop.probe_interval=0",
            "monitor.console=false",
            f"output_dir={tmp_path}",
            *extra,
        ],
    )


def test_the_trainer_trains_the_bf16_sampler_module_itself(tmp_path: Path) -> None:
    w = build(_config(tmp_path), None)
    try:
        trainer, sampler = w.trainer, w.policy.shared_module()
        assert trainer is not None and sampler is not None
        assert trainer.base_model is sampler  # no fp32 copy: the sampler samples with what is trained
        assert {p.dtype for p in sampler.parameters()} == {torch.bfloat16}
        assert trainer.masters is not None
        assert {m.dtype for m in trainer.masters.state()} == {torch.float32}
    finally:
        asyncio.run(w.close())


def test_async_sampling_gets_a_bf16_copy_pushed_after_each_step(tmp_path: Path) -> None:
    w = build(_config(tmp_path, "loop.mode=async"), None)
    try:
        trainer, sampler = w.trainer, w.policy.shared_module()
        assert trainer is not None and sampler is not None
        assert trainer.base_model is not sampler
        assert {p.dtype for p in trainer.base_model.parameters()} == {torch.bfloat16}
        name, weight = next(iter(trainer.base_model.named_parameters()))
        with torch.no_grad():
            weight.add_(0.125)  # what an optimiser step does to the trained weights
        trainer.version += 1
        sync_weights(trainer, w.policy)
        pushed = dict(sampler.named_parameters())[name]
        assert torch.equal(pushed, weight.detach())
        assert w.policy.version == trainer.version
    finally:
        asyncio.run(w.close())


def test_a_run_with_a_bf16_sampler_trains_and_finishes(tmp_path: Path) -> None:
    summary = asyncio.run(run(_config(tmp_path, "loop.steps=2")))
    assert summary.steps == 2
    rows = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/loss" in r]
    assert [r["train/version"] for r in steps] == [1.0, 2.0]
    # each step sampled with the weights the previous step pushed (a missed push would show staleness)
    assert [r["async/staleness_max"] for r in steps] == [0.0, 0.0]
    assert sum(r["train/sequences"] for r in steps) > 0
    checkpoint = Path(summary.run_dir) / "checkpoints" / "step_2"
    saved = torch.load(checkpoint / "model.pt", weights_only=True)
    assert {t.dtype for t in saved.values() if t.is_floating_point()} == {torch.bfloat16}
    masters = torch.load(checkpoint / "master.pt", weights_only=True)
    assert {t.dtype for t in masters} == {torch.float32}


def test_a_bf16_sampler_in_its_own_process_has_a_bf16_trainer(tmp_path: Path) -> None:
    w = build(_config(tmp_path, "policy.separate_process=true"), None)
    try:
        assert w.trainer is not None and w.policy.shared_module() is None
        assert {p.dtype for p in w.trainer.base_model.parameters()} == {torch.bfloat16}
    finally:
        asyncio.run(w.close())
