"""A bf16 sampler (`policy.dtype: bfloat16`) with `trainer.mixed_precision: bf16`: the trainer owns an fp32
master copy, never the sampler's 16-bit weights, and pushes them (cast) to the sampler after each step."""

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


def test_the_trainer_keeps_fp32_weights_and_pushes_them_to_the_bf16_sampler(tmp_path: Path) -> None:
    w = build(_config(tmp_path), None)
    try:
        trainer, sampler = w.trainer, w.policy.shared_module()
        assert trainer is not None and sampler is not None
        assert trainer.base_model is not sampler
        assert {p.dtype for p in trainer.base_model.parameters()} == {torch.float32}
        assert {p.dtype for p in sampler.parameters()} == {torch.bfloat16}
        name, master = next(iter(trainer.base_model.named_parameters()))
        with torch.no_grad():
            master.add_(0.125)  # what an optimiser step does to the master weights
        trainer.version += 1
        sync_weights(trainer, w.policy)
        pushed = dict(sampler.named_parameters())[name]
        assert pushed.dtype == torch.bfloat16
        assert torch.equal(pushed, master.detach().to(torch.bfloat16))
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
    saved = torch.load(Path(summary.run_dir) / "checkpoints" / "step_2" / "model.pt", weights_only=True)
    assert {t.dtype for t in saved.values() if t.is_floating_point()} == {torch.float32}


def test_a_bf16_sampler_in_its_own_process_leaves_the_trainer_fp32_weights(tmp_path: Path) -> None:
    w = build(_config(tmp_path, "policy.separate_process=true"), None)
    try:
        assert w.trainer is not None and w.policy.shared_module() is None
        assert {p.dtype for p in w.trainer.base_model.parameters()} == {torch.float32}
    finally:
        asyncio.run(w.close())
