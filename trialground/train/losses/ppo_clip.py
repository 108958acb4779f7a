"""The PPO-clip policy loss with DAPO's asymmetric clip, token- or sequence-level aggregation and a k3 KL.

The `normalizer` is the number of policy tokens in the whole batch for `agg="token"` (DAPO), the number
of sequences in the whole batch for `agg="sequence"` (GRPO's original per-sequence mean, then mean over
sequences). Its settings are the trainer's own fields: `clip_low`, `clip_high`, `loss_agg`, `kl_coef`.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel

from trialground.train.losses.base import LossFn, LossInput, LossOutput

Aggregation = Literal["token", "sequence"]


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(r - l) - (r - l) - 1 >= 0, unbiased."""
    delta = ref_logprobs - logprobs  # [B, T]
    return torch.exp(delta) - delta - 1.0


def ppo_clip_loss(
    logprobs: torch.Tensor,  # [B, T] new policy, with grad
    old_logprobs: torch.Tensor,  # [B, T] behaviour policy (sampling or recomputed), no grad
    advantages: torch.Tensor,  # [B] one advantage per sequence, or [B, T] one per target
    mask: torch.Tensor,  # [B, T] 1.0 on policy tokens
    *,
    clip_low: float,
    clip_high: float,
    agg: Aggregation = "token",
    normalizer: float | None = None,
    ref_logprobs: torch.Tensor | None = None,  # [B, T] reference policy, no grad
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,  # [B, T] per-token entropy, metrics only
    is_weights: torch.Tensor | None = None,  # [B, T] importance weights of the policy-gradient term, no grad
) -> LossOutput:
    """loss = agg(w * max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)) + kl_coef * k3), with
    w the sampler/trainer importance weights (`train.is_correction`; 1 without them).

    `normalizer` defaults to this call's own token count (token agg) or sequence count (sequence agg).
    Metric sums: pg_loss, kl, entropy, ratio, clipped (either bound active), clipped_low, clipped_high.
    """
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv  # [B, 1] or [B, T]
    log_ratio = (logprobs - old_logprobs) * mask  # [B, T]; masked first so padding cannot overflow exp
    ratio = torch.exp(log_ratio)  # [B, T]
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)  # [B, T]
    unclipped = -adv * ratio  # [B, T]
    clipped = -adv * clipped_ratio  # [B, T]
    per_token = torch.maximum(unclipped, clipped)  # [B, T]
    if is_weights is not None:
        per_token = per_token * is_weights.to(per_token.dtype)
    pg_per_token = per_token
    kl: torch.Tensor | None = None
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs)  # [B, T]
        if kl_coef > 0.0:
            per_token = per_token + kl_coef * kl

    tokens_per_seq = mask.sum(dim=1)  # [B]
    if agg == "token":
        norm = float(mask.sum().item()) if normalizer is None else normalizer
        loss = (per_token * mask).sum() / max(norm, 1.0)
    elif agg == "sequence":
        norm = float(mask.shape[0]) if normalizer is None else normalizer
        seq_loss = (per_token * mask).sum(dim=1) / tokens_per_seq.clamp(min=1.0)  # [B]
        loss = seq_loss.sum() / max(norm, 1.0)
    else:
        raise ValueError(f"unknown loss aggregation {agg!r}: expected token or sequence")

    with torch.no_grad():
        # A bound is active when the clipped term won the max and the ratio is outside that bound.
        active = (clipped > unclipped) & (mask > 0)  # [B, T]
        low = active & (ratio < 1.0 - clip_low)
        high = active & (ratio > 1.0 + clip_high)
        sums = {
            "pg_loss": float((pg_per_token * mask).sum().item()),
            "ratio": float((ratio * mask).sum().item()),
            "clipped": float(active.sum().item()),
            "clipped_low": float(low.sum().item()),
            "clipped_high": float(high.sum().item()),
        }
        if kl is not None:
            sums["kl"] = float((kl * mask).sum().item())
        if entropy is not None:
            sums["entropy"] = float((entropy * mask).sum().item())
    return LossOutput(loss=loss, sums=sums, tokens=int(mask.sum().item()))


def make(config: Any, settings: BaseModel) -> LossFn:
    """The loss with `config`'s (a `TrainerConfig`) clip range, aggregation and KL coefficient."""

    def loss(x: LossInput) -> LossOutput:
        return ppo_clip_loss(
            x.logprobs,
            x.old_logprobs,
            x.advantages,
            x.mask,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            agg=config.loss_agg,
            normalizer=x.normalizer,
            ref_logprobs=x.ref_logprobs,
            kl_coef=config.kl_coef,
            entropy=x.entropy,
            is_weights=x.is_weights,
        )

    return loss
