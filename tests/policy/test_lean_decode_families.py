"""The lean decoder on every architecture it covers: same tokens and logprobs as transformers' own forward;
architectures it does not cover are refused (HFPolicy then samples through transformers)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

from trialground.policy.backends.hf.hf import sample_batch
from trialground.policy.backends.hf.llama_decode import LlamaDecoder, unsupported_reason

COMMON: dict[str, Any] = dict(
    vocab_size=101,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    pad_token_id=0,
    eos_token_id=1,
)

COVERED = {
    "llama-biases": ("LlamaConfig", "LlamaForCausalLM", {"attention_bias": True, "mlp_bias": True}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 64}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"rope_theta": 1000.0}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 32, "tie_word_embeddings": True}),
}


def _model(config_cls: str, model_cls: str, extra: dict[str, Any], seed: int = 0) -> Any:
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**(COMMON | extra))
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # random init leaves biases and norm weights at 0 / 1: make them matter
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("arch", sorted(COVERED))
def test_lean_decoder_samples_what_transformers_samples(arch: str, temperature: float) -> None:
    model = _model(*COVERED[arch])
    assert unsupported_reason(model, 40) is None
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 101, (n,), generator=gen).tolist() for n in (3, 15, 9, 1)]
    prompts = prompts * 2 + [prompts[1][:4]]  # repeated prompts (prefix sharing) and one more length
    kw: dict[str, Any] = dict(max_new_tokens=24, temperature=temperature, eos_ids=[1], pad_id=0)
    ref = sample_batch(model, prompts, generator=torch.Generator().manual_seed(3), **kw)
    lean = sample_batch(
        model, prompts, generator=torch.Generator().manual_seed(3), decoder=LlamaDecoder(model), **kw
    )
    assert lean.token_ids == ref.token_ids
    assert lean.finished_by_eos == ref.finished_by_eos
    for a, b in zip(lean.logprobs, ref.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert sum(len(t) for t in ref.token_ids) > 24 * 2  # it really generated


def test_a_sliding_window_shorter_than_the_sequence_is_refused() -> None:
    model = _model(*COVERED["mistral"])  # window 64
    assert unsupported_reason(model, 64) is None
    assert "sliding-window" in (unsupported_reason(model, 65) or "")
    assert "sliding-window" in (unsupported_reason(model) or "")


@pytest.mark.parametrize(
    ("config_cls", "model_cls", "extra"),
    [
        ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
        ("PhiConfig", "PhiForCausalLM", {}),
        ("LlamaConfig", "LlamaForCausalLM", {"hidden_act": "gelu"}),
        ("LlamaConfig", "LlamaForCausalLM", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    ],
)
def test_architectures_it_does_not_cover_are_refused(config_cls: str, model_cls: str, extra: dict) -> None:
    model = _model(config_cls, model_cls, extra)
    assert unsupported_reason(model, 40) is not None
    with pytest.raises(ValueError, match="cannot run this model"):
        LlamaDecoder(model)
