"""Loading any causal LM from a local directory: the right class, strictly, and sampling that equals the
transformers path wherever the lean decoder runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from modelkit import make_checkpoint
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from trialground.errors import PolicyError
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig


def test_qwen2_loads_as_qwen2_with_its_biases(arch_dirs: dict[str, Path]) -> None:
    policy = HFPolicy(PolicyConfig(model=str(arch_dirs["qwen2"])))
    assert type(policy.model).__name__ == "Qwen2ForCausalLM"
    assert policy.model.model.layers[0].self_attn.q_proj.bias is not None
    reference = AutoModelForCausalLM.from_pretrained(arch_dirs["qwen2"]).eval()
    x = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.equal(policy.model(input_ids=x).logits, reference(input_ids=x).logits)


def _rewrite_weights(src: Path, dst: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    dst.mkdir()
    for item in src.iterdir():
        if item.name != "model.safetensors":
            (dst / item.name).write_bytes(item.read_bytes())
    weights = load_file(src / "model.safetensors")
    edit(weights)
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_missing_and_unexpected_weights_are_errors(arch_dirs: dict[str, Path], tmp_path: Path) -> None:
    src = arch_dirs["qwen2"]
    missing = _rewrite_weights(
        src, tmp_path / "missing", lambda w: w.pop("model.layers.1.self_attn.k_proj.bias")
    )
    with pytest.raises(
        PolicyError, match=r"missing from the checkpoint: model\.layers\.1\.self_attn\.k_proj"
    ):
        HFPolicy(PolicyConfig(model=str(missing)))
    extra = _rewrite_weights(
        src, tmp_path / "extra", lambda w: w.__setitem__("model.layers.0.mlp.extra.weight", torch.zeros(2))
    )
    with pytest.raises(PolicyError, match=r"not in the architecture: model\.layers\.0\.mlp\.extra\.weight"):
        HFPolicy(PolicyConfig(model=str(extra)))
    # a Llama config over Qwen2 weights (what loading every checkpoint as Llama used to do): the biases
    # have nowhere to go
    as_llama = _rewrite_weights(src, tmp_path / "as_llama", lambda w: None)
    config = json.loads((as_llama / "config.json").read_text())
    config.update(model_type="llama", architectures=["LlamaForCausalLM"])
    (as_llama / "config.json").write_text(json.dumps(config))
    with pytest.raises(PolicyError, match=r"not in the architecture: .*q_proj\.bias"):
        HFPolicy(PolicyConfig(model=str(as_llama)))


def test_a_model_that_is_not_a_causal_lm_is_refused(tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel

    BertModel(
        BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    ).save_pretrained(tmp_path / "bert")
    with pytest.raises(PolicyError):
        HFPolicy(PolicyConfig(model=str(tmp_path / "bert")))
    with pytest.raises(PolicyError, match=r"config\.json missing"):
        HFPolicy(PolicyConfig(model=str(tmp_path / "nothing")))


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2"])
async def test_policy_tokens_equal_the_transformers_path(arch: str, tmp_path: Path) -> None:
    """Covered architectures sample through the lean decoder, the others through transformers; either
    way `decode="auto"` gives exactly the tokens of `decode="transformers"`."""
    model_dir = make_checkpoint(arch, tmp_path / arch, seed=3)
    auto = HFPolicy(PolicyConfig(model=str(model_dir)))
    plain = HFPolicy(PolicyConfig(model=str(model_dir), decode="transformers"))
    lean = auto._lean_decoder(128)
    assert (lean is not None) == (arch in ("llama", "mistral", "qwen2", "qwen3"))
    prompts = [
        auto.encode_chat([{"role": "user", "content": t.prompt}])
        for t in generate_codegen_tasks(3, seed=1, split="eval")
    ]
    prompts = [p for p in prompts for _ in range(2)]
    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, max_new_tokens=20, seed=5)
        a, b = await auto.generate(prompts, params), await plain.generate(prompts, params)
        assert [g.token_ids for g in a] == [g.token_ids for g in b]
        for ga, gb in zip(a, b, strict=True):
            assert ga.logprobs == pytest.approx(gb.logprobs, abs=1e-4)


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path: Path) -> None:
    from modelkit import bundled_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bundled_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok) - 10, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(tmp_path / "small_vocab")
    tok.save_pretrained(tmp_path / "small_vocab")
    with pytest.raises(PolicyError, match=rf"tokenizer has {len(tok)} tokens but the model embeds only"):
        HFPolicy(PolicyConfig(model=str(tmp_path / "small_vocab")))
