"""The real pretrained model through the loop: two LoRA steps of the truncated Gemma (gemma_kit.py) on
the quickstart's tasks, its checkpoints exported as a merged model that transformers loads, and a resume
from step 1 that repeats step 2 exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from trialground.cli import app

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
SMALL = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.probe_interval=0",
    "loop.checkpoint_interval=1",
    "loop.batch_tasks=2",
    "loop.samples_per_task=2",
    "loop.rollout_concurrency=2",
    "tasks.num_train=8",
    "tasks.num_eval=2",
    "policy.sampling.max_new_tokens=6",
    "policy.eval_sampling.max_new_tokens=6",
    "policy.max_context_tokens=512",
    "trainer.lora_rank=4",
    "trainer.lr=0.001",
    "sandbox.limits.wall_s=60",
    "reward.grading.test_timeout_s=60",
    "reward.grading.total_timeout_s=300",
]

pytestmark = pytest.mark.slow


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def run_dir(gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gemma_run")
    sets = [
        a for o in [*SMALL, f"policy.model={gemma_dir}", f"output_dir={out}", "name=g"] for a in ("--set", o)
    ]
    cli("train", QUICKSTART, *sets)
    return out / "g"


def _steps(run: Path) -> list[dict[str, float]]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [m for m in rows if "train/loss" in m]


def test_lora_trains_the_real_model_and_exports_it_merged(run_dir: Path, tmp_path: Path) -> None:
    steps = _steps(run_dir)
    assert [m["step"] for m in steps] == [1, 2] and all(m["train/loss"] == m["train/loss"] for m in steps)
    adapter = json.loads((run_dir / "checkpoints" / "step_2" / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 4
    rows = pq.read_table(run_dir / "trajectories" / "step_2.parquet").to_pylist()
    for row in rows:  # what training used: sampled after step 1's update, by version 1
        assert row["turn_roles"] == ["prompt", "policy"] and row["turn_versions"] == [None, 1]
        assert len(row["turn_logprobs"][1]) == len(row["turn_token_ids"][1]) == sum(row["loss_mask"])
    cli("export", str(run_dir), "--merge-lora", "--out", str(tmp_path / "full"))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "full")
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.config.num_hidden_layers == 2
    assert len(AutoTokenizer.from_pretrained(tmp_path / "full")) == 262144


def test_a_resume_from_step_1_repeats_step_2(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "g"
    # the step-2 checkpoint and trajectories are gone: resumed from step 1, the run makes them again
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("step_2", "step_2.parquet"))
    cli("train", "--resume", str(copy))
    before = pq.read_table(run_dir / "trajectories" / "step_2.parquet").column("completion").to_pylist()
    after = pq.read_table(copy / "trajectories" / "step_2.parquet").column("completion").to_pylist()
    assert before == after
    assert [m["train/loss"] for m in _steps(copy)] == [m["train/loss"] for m in _steps(run_dir)]
