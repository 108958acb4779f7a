"""The trainer's memory options on CPU: gradient checkpointing recomputes layers and changes nothing
else; bf16 autocast runs the matrix products in bf16 and keeps the weights in fp32."""

from __future__ import annotations

import pytest
import torch
from train_helpers import PAD, sequence_logprobs, tiny_llama, traj

from trialground.train.advantages import with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer

SPECS = [([1, 2, 3], [4, 5, 6, 7], 1.0), ([1, 2, 3], [8, 9], -1.0), ([5, 6], [10, 11, 12], 0.5)]


def _batch(model: torch.nn.Module) -> list:  # type: ignore[type-arg]
    return [
        traj(p, [("policy", c, sequence_logprobs(model, p + c, len(p)))], group="g", index=i)  # type: ignore[arg-type]
        for i, (p, c, _) in enumerate(SPECS)
    ]


def _step(**options: object) -> tuple[dict[str, torch.Tensor], dict[str, float], list[torch.dtype], int]:
    """One step on a fresh tiny model: the weights' gradients (flattened, in `weights["grad"]`), the
    metrics, the dtypes of layer 0's MLP outputs and how often that MLP ran."""
    model = tiny_llama(seed=0)
    batch = _batch(model)
    trainer = Trainer(model, TrainerConfig(lr=1e-2, **options), pad_id=PAD)  # type: ignore[arg-type]
    seen: list[torch.dtype] = []
    calls: list[bool] = []
    mlp = model.model.layers[0].mlp
    mlp.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    forward = mlp.forward  # a checkpoint's recomputation runs no module hooks, and may stop mid-forward

    def counted(x: torch.Tensor) -> torch.Tensor:
        calls.append(torch.is_grad_enabled())
        return forward(x)

    mlp.forward = counted  # type: ignore[method-assign]
    grads: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: grads.__setitem__(name, g.detach().clone()))  # type: ignore[misc]
    metrics = trainer.step(with_advantages(batch, [s[2] for s in SPECS]))
    out = trainer.state_dict()
    out["grad"] = torch.cat([grads[n].flatten() for n, _ in model.named_parameters()])
    return out, metrics, seen, len(calls)


def test_gradient_checkpointing_recomputes_each_layer_and_gives_the_same_step() -> None:
    plain, plain_metrics, _, plain_calls = _step(share_prompt=False)
    ckpt, ckpt_metrics, _, ckpt_calls = _step(share_prompt=False, gradient_checkpointing=True)
    assert plain_calls == 1  # one training forward (sampling logprobs were recorded)
    assert ckpt_calls == 2  # ... and its recomputation in the backward pass
    for k in plain:
        torch.testing.assert_close(ckpt[k], plain[k], rtol=0, atol=1e-6, msg=k)
    assert ckpt_metrics["train/grad_norm"] == pytest.approx(plain_metrics["train/grad_norm"], rel=1e-5)


def test_gradient_checkpointing_composes_with_the_shared_prompt_pass() -> None:
    """The prompt pass and the completion pass each recompute their layers in the backward pass; their KV
    caches replay the writes (train.shared_prompt), so gradients equal the unchecked shared-prompt run."""
    plain, plain_metrics, _, plain_calls = _step(share_prompt=True)
    ckpt, ckpt_metrics, _, ckpt_calls = _step(share_prompt=True, gradient_checkpointing=True)
    assert plain_calls == 2  # the prompts' pass and the completions' pass
    assert ckpt_calls == 4  # ... and the recomputation of each in the backward pass
    assert plain["grad"].abs().sum() > 0
    torch.testing.assert_close(ckpt["grad"], plain["grad"], rtol=0, atol=1e-6)
    for k in plain:
        torch.testing.assert_close(ckpt[k], plain[k], rtol=0, atol=1e-6, msg=k)
    assert ckpt_metrics["train/loss"] == pytest.approx(plain_metrics["train/loss"], rel=1e-6)


def test_bf16_autocast_runs_the_forward_in_bf16_and_keeps_fp32_weights() -> None:
    full, full_metrics, full_dtypes, _ = _step()
    mixed, mixed_metrics, mixed_dtypes, _ = _step(mixed_precision="bf16")
    assert set(full_dtypes) == {torch.float32}
    assert set(mixed_dtypes) == {torch.bfloat16}
    assert all(v.dtype == torch.float32 for v in mixed.values())
    assert mixed["grad"].dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(mixed["grad"], full["grad"], dim=0).item()
    assert 0.99 < cosine < 1.0 - 1e-7  # the same gradient up to bf16 rounding (and not bit-equal)
    assert mixed_metrics["train/loss"] == pytest.approx(full_metrics["train/loss"], abs=0.05)
    assert mixed_metrics["train/tokens"] == full_metrics["train/tokens"]


def test_bf16_on_cpu_runs_attention_in_fp32_with_the_same_masks() -> None:
    from unittest import mock

    import torch.nn.functional as F

    from trialground.train.memory import FP32_ATTENTION

    ids, mask = torch.tensor([[1, 2, 3, 4], [PAD, 5, 6, 7]]), torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    full = tiny_llama(seed=0)
    with torch.no_grad():
        want = full(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    model = tiny_llama(seed=0)
    Trainer(model, TrainerConfig(lr=1e-2, mixed_precision="bf16"), pad_id=PAD)
    assert model.config._attn_implementation == FP32_ATTENTION
    seen: list[tuple[torch.dtype, bool]] = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):  # type: ignore[no-untyped-def]
        seen.append((q.dtype, attn_mask is not None))
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    patched = mock.patch.object(F, "scaled_dot_product_attention", spy)
    with patched, torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    assert seen and all(s == (torch.float32, True) for s in seen)  # fp32, and the padding mask applied
    real = mask.bool()
    assert torch.allclose(got[real], want[real], atol=0.02)  # bf16 matmuls only
