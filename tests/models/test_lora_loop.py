"""LoRA through the whole loop: it trains in sync and async mode, the update reaches the sampler once,
every checkpoint holds a peft adapter that peft loads, `eval --checkpoint` reads it, `export` writes it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from trialground.cli import app
from trialground.policy.tiny import tiny_model_dir

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
SMALL = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.checkpoint_interval=1",
    "loop.batch_tasks=4",
    "loop.samples_per_task=4",
    "loop.dynamic_sampling=true",  # groups whose rewards are all equal are replaced: every step trains
    "tasks.num_train=50",
    "tasks.num_eval=4",
    "policy.sampling.max_new_tokens=24",
    "policy.eval_sampling.max_new_tokens=24",
    "trainer.lora_rank=8",
    "trainer.lr=0.01",
    # the trainer recomputes old logprobs, so `train/sampler_logprob_diff` says how far the weights the
    # policy sampled with are from the trainer's
    "trainer.old_logprobs=recompute",
    "sandbox.limits.wall_s=60",
    "reward.grading.test_timeout_s=60",
    "reward.grading.total_timeout_s=300",
]

pytestmark = pytest.mark.slow


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def sets(*overrides: str) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def train(out: Path, name: str, *overrides: str) -> tuple[Path, list[dict[str, float]]]:
    cli("train", QUICKSTART, *sets(*SMALL, f"output_dir={out}", f"name={name}", *overrides))
    run_dir = out / name
    return run_dir, [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, float]]]:
    return train(tmp_path_factory.mktemp("lora"), "sync")


def test_lora_trains_in_sync_mode_and_samples_with_the_trained_adapters(sync_run) -> None:  # type: ignore[no-untyped-def]
    _, metrics = sync_run
    steps = [m for m in metrics if "train/loss" in m]
    assert len(steps) == 2 and all(m["train/active_sequences"] > 0 for m in steps)
    # Step 2 was sampled after step 1's update: the policy's logprobs equal the trainer's.
    assert steps[1]["train/sampler_logprob_diff"] < 1e-4


def test_every_checkpoint_holds_a_peft_adapter_equal_to_its_hf_weights(sync_run) -> None:  # type: ignore[no-untyped-def]
    """The untouched base model plus the adapter is the trained model: merged weights written back into
    the shared module (the update applied twice) would have moved the base (measured: 0.021 off)."""
    run_dir, _ = sync_run
    for step in (1, 2):
        ckpt = run_dir / "checkpoints" / f"step_{step}"
        config = json.loads((ckpt / "adapter" / "adapter_config.json").read_text())
        assert config["r"] == 8 and config["peft_type"] == "LORA"
        assert Path(config["base_model_name_or_path"]) == tiny_model_dir().resolve()
        base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
        peft_model = PeftModel.from_pretrained(base, ckpt / "adapter")
        b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
        assert b and any(bool(p.abs().sum() > 0) for p in b)  # trained (B starts at zero)
        merged = peft_model.merge_and_unload().state_dict()
        hf = AutoModelForCausalLM.from_pretrained(ckpt / "hf").state_dict()
        assert merged.keys() == hf.keys()
        for name, value in hf.items():
            assert torch.allclose(value, merged[name], atol=1e-6), name


def test_eval_checkpoint_reads_the_adapter(sync_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_dir, _ = sync_run
    ckpt = run_dir / "checkpoints" / "step_2"
    common = ["--json", *sets(*SMALL)]
    via_hf_model = cli("eval", QUICKSTART, *common, "--set", f"policy.model={ckpt / 'hf'}")
    only_adapter = tmp_path / "step_2"
    shutil.copytree(ckpt, only_adapter, ignore=shutil.ignore_patterns("hf", "model.pt"))
    via_adapter = cli("eval", QUICKSTART, *common, "--checkpoint", str(only_adapter))
    assert json.loads(via_adapter) == json.loads(via_hf_model)
    assert json.loads(via_adapter)["eval/n_tasks"] == 4


def test_export_writes_the_adapter_or_the_merged_model(sync_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_dir, _ = sync_run
    assert "peft adapter" in cli("export", str(run_dir), "--out", str(tmp_path / "adapter"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    from_adapter = PeftModel.from_pretrained(base, tmp_path / "adapter").merge_and_unload().state_dict()
    assert "LoRA merged" in cli(
        "export", str(run_dir), "--step", "2", "--merge-lora", "--out", str(tmp_path / "full")
    )
    full = AutoModelForCausalLM.from_pretrained(tmp_path / "full").state_dict()
    for name, value in full.items():
        assert torch.allclose(value, from_adapter[name], atol=1e-6), name
    result = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(tmp_path / "full")])
    assert result.exit_code == 2 and "not an empty directory" in result.output
    result = CliRunner().invoke(app, ["export", str(run_dir), "--step", "7", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "step_1, step_2" in result.output


def test_lora_trains_in_async_mode(tmp_path: Path) -> None:
    run_dir, metrics = train(tmp_path, "async", "loop.mode=async")
    steps = [m for m in metrics if "train/loss" in m]
    assert len(steps) == 2 and all(m["train/active_sequences"] > 0 for m in steps)
    assert (run_dir / "checkpoints" / "step_2" / "adapter" / "adapter_model.safetensors").is_file()
