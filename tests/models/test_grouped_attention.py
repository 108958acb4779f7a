"""The trainer's fp32 CPU attention (`trialground.train.memory.fp32_attention`) on every architecture of
`modelkit.ARCHS` and `MOE_ARCHS`: with a padding mask transformers copies each key/value head to its query
heads before SDPA; where the heads are grouped, the fp32 attention lets SDPA group them (`enable_gqa`)
instead, and every architecture must give the logits and gradients of transformers' own SDPA path."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
import torch.nn.functional as F
import transformers
from modelkit import ARCHS, MOE_ARCHS

from trialground.train.memory import fp32_attention


@pytest.mark.parametrize("arch", sorted(ARCHS | MOE_ARCHS))
def test_fp32_attention_gives_transformers_values_and_groups_heads_without_copies(arch: str) -> None:
    config_cls, kwargs = (ARCHS | MOE_ARCHS)[arch]
    config = getattr(transformers, config_cls)(vocab_size=64, pad_token_id=0, **kwargs)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 7, 8, 9, 10]])
    mask = (ids != 0).long()

    def run(ours: bool) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, bool]]]:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
        if ours:
            assert fp32_attention(model)
        calls: list[tuple[int, bool]] = []
        sdpa = F.scaled_dot_product_attention

        def spy(q, k, v, *args, **kw):  # type: ignore[no-untyped-def]
            calls.append((k.shape[1], bool(kw.get("enable_gqa"))))
            return sdpa(q, k, v, *args, **kw)

        with mock.patch.object(F, "scaled_dot_product_attention", spy):
            logits = model(input_ids=ids, attention_mask=mask).logits
        logits[mask.bool()].logsumexp(-1).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return logits.detach(), grads, calls

    want, want_grads, plain = run(ours=False)
    got, got_grads, ours = run(ours=True)
    heads = getattr(config, "num_attention_heads", None) or config.n_head
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    layers = config.num_hidden_layers
    assert plain == [(heads, False)] * layers  # transformers: every key/value head copied to its queries
    assert ours == ([(kv_heads, True)] if kv_heads < heads else [(heads, False)]) * layers
    real = mask.bool()
    assert torch.allclose(got[real], want[real], atol=1e-5), (got - want).abs().max()
    assert torch.allclose(got_grads, want_grads, atol=1e-5), (got_grads - want_grads).abs().max()
