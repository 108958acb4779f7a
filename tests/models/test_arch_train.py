"""Any causal LM trains through `trialground train` with `policy.model=DIR`, and its checkpoint's `hf/`
loads with `AutoModelForCausalLM.from_pretrained` with every weight present and equal to the trained ones.

Every architecture of `modelkit.ARCHS` (8 of them, ~1 s each on tiny configs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from modelkit import ARCHS
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from trialground.cli import app
from trialground.train.hf_checkpoint import checkpoint_weights

ROOT = Path(__file__).resolve().parents[2]
# A random model never solves a task: replies stop early at varied lengths (`stop_often`) and the soft
# overlong penalty rewards shorter ones, so groups have different rewards and the weights really move.
TINY_RUN = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.batch_tasks=2",
    "loop.samples_per_task=4",
    "tasks.num_train=20",
    "tasks.num_eval=2",
    "policy.sampling.max_new_tokens=12",
    "policy.eval_sampling.max_new_tokens=12",
    "reward.overlong_penalty=1.0",
    "reward.overlong_buffer=12",
    "trainer.lr=0.01",
    "sandbox.limits.wall_s=60",
    "reward.grading.test_timeout_s=60",
    "reward.grading.total_timeout_s=300",
]

pytestmark = pytest.mark.slow


def train(tmp_path: Path, name: str, *overrides: str) -> Path:
    args = ["train", str(ROOT / "examples" / "quickstart.yaml")]
    for o in [*TINY_RUN, f"output_dir={tmp_path}", f"name={name}", *overrides]:
        args += ["--set", o]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return tmp_path / name


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_architecture_trains_and_its_checkpoint_loads_with_transformers(
    arch: str, arch_dirs: dict[str, Path], tmp_path: Path
) -> None:
    run_dir = train(tmp_path, arch, f"policy.model={arch_dirs[arch]}")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(m.get("train/active_sequences", 0.0) for m in metrics) > 0  # a real gradient step ran
    ckpt = run_dir / "checkpoints" / "step_2"
    hf = ckpt / "hf"
    assert {"config.json", "generation_config.json", "model.safetensors"} <= {p.name for p in hf.iterdir()}
    loaded, info = AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert type(loaded).__name__ == type(AutoModelForCausalLM.from_pretrained(arch_dirs[arch])).__name__
    trained = torch.load(ckpt / "model.pt", weights_only=True)  # the trainer's own state dict
    initial = AutoModelForCausalLM.from_pretrained(arch_dirs[arch]).state_dict()
    exported = loaded.state_dict()
    assert exported.keys() == trained.keys()
    for name, value in exported.items():
        assert torch.equal(value, trained[name]), name
    assert any(not torch.equal(v, initial[k]) for k, v in exported.items())  # and training changed them
    tok = AutoTokenizer.from_pretrained(hf)
    assert tok.chat_template and len(tok) <= loaded.config.vocab_size


def test_eval_checkpoint_of_a_full_fine_tuning_run_reads_hf(
    arch_dirs: dict[str, Path], tmp_path: Path
) -> None:
    run_dir = train(tmp_path, "gemma", f"policy.model={arch_dirs['gemma']}")
    ckpt = run_dir / "checkpoints" / "step_2"
    sets = [a for o in [*TINY_RUN, "tasks.num_eval=3"] for a in ("--set", o)]
    quickstart = str(ROOT / "examples" / "quickstart.yaml")

    def evaluate(*args: str) -> dict[str, float]:
        result = CliRunner().invoke(app, ["eval", quickstart, "--json", *sets, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    from_checkpoint = evaluate("--set", f"policy.model={arch_dirs['gemma']}", "--checkpoint", str(ckpt))
    assert from_checkpoint["eval/n_tasks"] == 3
    # what it loads into the policy: the trained weights, not the starting ones
    loaded = checkpoint_weights(ckpt)
    trained = torch.load(ckpt / "model.pt", weights_only=True)
    initial = AutoModelForCausalLM.from_pretrained(arch_dirs["gemma"]).state_dict()
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(v, trained[k]) for k, v in loaded.items())
    assert not all(torch.equal(v, initial[k]) for k, v in loaded.items())
    missing = CliRunner().invoke(app, ["eval", quickstart, "--checkpoint", str(tmp_path)])
    assert missing.exit_code == 2 and "no hf/ or adapter/" in missing.output
