"""The Gemma 3 lean decoder samples what transformers' own forward samples: a random small Gemma 3 whose
sliding window (6) is shorter than its sequences, a sliding and a global layer with their own rotary
bases, and norm weights moved off zero so the (1 + weight) scaling matters. The truncated real model is
checked in tests/models/test_gemma.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from trialground.policy.backends.hf.gemma_decode import Gemma3Decoder, gemma_refusal
from trialground.policy.backends.hf.hf import sample_batch
from trialground.policy.backends.hf.lean_decoders import decoder_class


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny matmuls on a busy machine: two threads wait on each other far longer than they compute."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(**extra: Any) -> Gemma3ForCausalLM:
    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=101,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=24,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
        **extra,
    )
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_gemma_decoder_samples_what_transformers_samples(temperature: float) -> None:
    model = _model()
    assert decoder_class(model, 60) is Gemma3Decoder
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 101, (n,), generator=gen).tolist() for n in (3, 15, 9, 1)]
    prompts = prompts * 2 + [prompts[1][:4]]  # repeated prompts (a shared prefix) and one more length
    kw: dict[str, Any] = dict(max_new_tokens=20, temperature=temperature, eos_ids=[1], pad_id=0)
    ref = sample_batch(model, prompts, generator=torch.Generator().manual_seed(3), **kw)
    lean = sample_batch(
        model, prompts, generator=torch.Generator().manual_seed(3), decoder=Gemma3Decoder(model), **kw
    )
    assert lean.token_ids == ref.token_ids
    for a, b in zip(lean.logprobs, ref.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert sum(len(t) for t in ref.token_ids) > 20 * 3  # it really generated, past the window


def test_what_the_gemma_decoder_does_not_compute_is_refused() -> None:
    assert "final_logit_softcapping" in (gemma_refusal(_model(final_logit_softcapping=30.0)) or "")
    assert "activation" in (gemma_refusal(_model(hidden_activation="silu")) or "")
    model = _model()
    from peft import LoraConfig, get_peft_model

    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert "LoRA" in (gemma_refusal(model) or "")
