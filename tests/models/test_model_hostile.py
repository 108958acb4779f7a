"""Models that are broken or hostile: a directory's own code never runs, a tokenizer without a chat template
and a truncated weight file are `PolicyError`s (exit 3 from the CLI), and LoRA on mixture-of-experts
models (Mixtral, Qwen3-MoE) keeps its adapters off the fused experts and the router, so checkpoint save
(sync mode) and weight sync (async mode) work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from modelkit import MOE_ARCHS, bundled_tokenizer, make_checkpoint

from trialground.errors import PolicyError
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.config import PolicyConfig
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer, lora_linear_targets

ROOT = Path(__file__).resolve().parents[2]
EVIL = "import pathlib, os\npathlib.Path(os.environ['EVIL_MARKER']).write_text('ran')\n"


def moe_checkpoint(arch: str, path: Path) -> Path:
    tok = bundled_tokenizer()
    cls, kwargs = MOE_ARCHS[arch]
    config = getattr(transformers, cls)(
        vocab_size=len(tok) + 16, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **kwargs
    )
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code], input="y\ny\ny\n", capture_output=True, text=True, timeout=300,
        env={**os.environ, **env, "PYTHONPATH": path},
    )  # fmt: skip


@pytest.mark.parametrize("where", ["model", "tokenizer"])
def test_a_model_directory_own_code_never_runs(tmp_path: Path, where: str) -> None:
    d = make_checkpoint("llama", tmp_path / "m")
    aliases = (
        "from transformers import LlamaConfig as EvilConfig\n"
        "from transformers import LlamaForCausalLM as EvilModel\n"
        "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
    )
    (d / "evil.py").write_text(EVIL + aliases)
    name = "tokenizer_config.json" if where == "tokenizer" else "config.json"
    data = json.loads((d / name).read_text())
    if where == "tokenizer":
        data["auto_map"] = {"AutoTokenizer": [None, "evil.EvilTokenizer"]}
        data.pop("tokenizer_class", None)
    else:
        data["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
        data["model_type"] = "evil"
    (d / name).write_text(json.dumps(data))
    marker = tmp_path / "marker"
    # "y" on stdin answers a trust-remote-code prompt, as a user at a terminal might.
    code = (
        "from trialground.policy.config import PolicyConfig\n"
        "from trialground.policy.backends.hf.hf import HFPolicy\n"
        "from trialground.errors import PolicyError\n"
        f"try:\n    HFPolicy(PolicyConfig(model={str(d)!r}))\n"
        "except PolicyError as e:\n    print('refused', e)\n"
    )
    out = _run_python(code, {"EVIL_MARKER": str(marker)})
    assert not marker.exists(), out.stdout + out.stderr
    assert out.returncode == 0, out.stderr


def test_a_tokenizer_without_a_chat_template_is_a_policy_error_with_own(tmp_path: Path) -> None:
    d = make_checkpoint("llama", tmp_path / "m")
    (d / "chat_template.jinja").unlink(missing_ok=True)
    data = json.loads((d / "tokenizer_config.json").read_text())
    data.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(data))
    with pytest.raises(PolicyError, match="no chat template"):
        HFPolicy(PolicyConfig(model=str(d), chat_template="own"))


def test_a_truncated_safetensors_file_is_a_policy_error(tmp_path: Path) -> None:
    d = make_checkpoint("llama", tmp_path / "m")
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(PolicyError, match="cannot load"):
        HFPolicy(PolicyConfig(model=str(d)))


@pytest.mark.slow
def test_the_cli_exits_3_on_a_broken_model(tmp_path: Path) -> None:
    d = make_checkpoint("llama", tmp_path / "m")
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    proc = subprocess.run(
        [sys.executable, "-m", "trialground", "train", str(ROOT / "examples" / "quickstart.yaml"),
         "--set", f"policy.model={d}", "--set", f"output_dir={tmp_path / 'runs'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "cannot load" in proc.stderr


@pytest.mark.parametrize("arch", sorted(MOE_ARCHS))
def test_lora_on_moe_saves_and_syncs_plain_weights(arch: str, tmp_path: Path) -> None:
    from trialground.train.hf_checkpoint import save_adapter, save_hf

    d = moe_checkpoint(arch, tmp_path / arch)
    model = transformers.AutoModelForCausalLM.from_pretrained(d)
    plain = {k: v.clone() for k, v in model.state_dict().items()}
    targets = lora_linear_targets(model)
    assert targets and not any(t.endswith((".gate", ".router")) or ".experts" in t for t in targets)
    trainer = Trainer(model, TrainerConfig(lora_rank=4), pad_id=0)
    with torch.no_grad():  # a trained adapter: B non-zero, so merged weights differ from the base
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.01)
    synced = trainer.state_dict()  # what async weight sync sends
    assert set(synced) == set(plain) and all(synced[k].shape == plain[k].shape for k in plain)
    assert any(not torch.equal(synced[k], plain[k]) for k in plain if "q_proj" in k)
    experts = [k for k in plain if ".experts." in k or k.endswith("mlp.gate.weight")]
    assert experts and all(torch.equal(synced[k], plain[k]) for k in experts)
    save_hf(trainer, tmp_path / "hf")  # what a sync checkpoint writes
    save_adapter(trainer, tmp_path / "adapter", base_model=d)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert all(torch.allclose(reloaded[k], synced[k]) for k in synced)
