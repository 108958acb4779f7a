"""Sampler/trainer mismatch: measured on every step, and corrected by importance weights when asked.

The sampler (vLLM, SGLang, a remote server, a top-k that the trainer does not apply) and the trainer do
not give a token the same probability. With `pi_s` the sampler's logprob of a sampled token (recorded with
it) and `pi_t` the trainer's own before the update, the per-token log-ratio is `r = pi_t - pi_s`:

- Metrics (`mismatch/*`, over policy tokens that carry a sampler logprob): `kl_k3`, the mean of Schulman's
  k3 `exp(r) - r - 1`, an estimate of KL(sampler || trainer) from the sampler's own samples;
  `ratio_mean`, `ratio_p05`, `ratio_p50`, `ratio_p95`, `ratio_max` of `exp(r)`; `flagged_frac`, the
  fraction of tokens whose weight the correction truncated or masked. The quantiles are this rank's
  (data parallel); the means are the whole batch's.
- `trainer.is_correction` (names as TRL's `vllm_importance_sampling_mode` and ms-swift's rollout
  correction): `none`; `token_truncate` (TIS: each token's policy-gradient term weighted by
  `min(exp(r), cap)`); `token_mask` (weight `exp(r)` where it lies in `[1/cap, cap]`, else 0: the token
  leaves the gradient); `sequence_truncate` and `sequence_mask` (MIS), the same on the sequence's ratio
  `exp(sum of r)`, one weight for all its tokens. Weights are constants (no gradient), computed once per
  step from the trainer's recomputed logprobs, so the PPO ratio's anchor is the trainer's own policy and
  the weight carries the sampler's difference.
"""

from __future__ import annotations

import math
from typing import Any, get_args

import torch

from trialground.train.config import ISCorrection, TrainerConfig

IS_CORRECTIONS: tuple[str, ...] = get_args(ISCorrection)
_MAX_LOG = 20.0  # exp(20) ~ 5e8: a sequence's summed log-ratio is clamped before exp (no inf weights)


def is_weights(
    mode: str,
    trainer: torch.Tensor,  # [b, T] the trainer's logprobs before the update, no grad
    sampler: torch.Tensor,  # [b, T] the sampler's logprobs of the same tokens
    mask: torch.Tensor,  # [b, T] 1.0 on policy tokens that carry a sampler logprob
    cap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [b, T], flagged [b, T] bool: tokens whose weight was truncated or masked)."""
    if mode not in IS_CORRECTIONS or mode == "none":
        raise ValueError(f"unknown importance-sampling correction {mode!r}: expected one of {IS_CORRECTIONS}")
    log_ratio = ((trainer - sampler) * mask).float()  # [b, T]
    on = mask > 0
    if mode.startswith("sequence"):
        seq = log_ratio.sum(dim=1, keepdim=True).clamp(-_MAX_LOG, _MAX_LOG)  # [b, 1]
        log_ratio = seq.expand_as(log_ratio)
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG, _MAX_LOG))  # [b, T]
    if mode.endswith("truncate"):
        flagged = on & (ratio > cap)
        weights = ratio.clamp(max=cap)
    else:
        flagged = on & ((ratio > cap) | (ratio < 1.0 / cap))
        weights = ratio.masked_fill(flagged, 0.0)
    weights = torch.where(on, weights, torch.ones_like(weights))  # rows without sampler logprobs: 1
    return weights.detach(), flagged


def keep_sampler_logprobs(samples: list[Any], config: TrainerConfig) -> list[Any]:
    """Keep each sample's sampler logprobs as `sampler_logprobs` (NaN where it has none: not measured,
    weight 1) and return the samples whose old logprobs the trainer recomputes: all of them under
    `old_logprobs: recompute` or a correction, else those without sampler logprobs."""
    again = config.old_logprobs == "recompute" or config.is_correction != "none"
    for s in samples:
        s.sampler_logprobs = s.old_logprobs or [math.nan] * len(s.mask)
    return [s for s in samples if again or s.old_logprobs is None]


def weigh(
    config: TrainerConfig,
    logp: torch.Tensor,  # [b, T] this pass's logprobs (the first epoch's: the trainer's before the update)
    old: torch.Tensor,  # [b, T] the trainer's recomputed logprobs (the PPO anchor)
    sampled: torch.Tensor,  # [b, T] the sampler's; NaN where the token has none
    mask: torch.Tensor,  # [b, T] 1.0 on policy tokens
    meter: MismatchMeter | None,
) -> torch.Tensor | None:
    """The step's hook: measure into `meter` (first epoch only) and return the weights of
    `config.is_correction` (None for "none")."""
    on = mask * torch.isfinite(sampled).to(mask.dtype)  # [b, T]
    sampled = torch.nan_to_num(sampled, nan=0.0)
    weights = None
    if config.is_correction != "none":
        weights, flagged = is_weights(config.is_correction, old, sampled, on, config.is_cap)
    if meter is not None:
        meter.add(logp, sampled, on)
        meter.flagged += int(flagged.sum()) if weights is not None else 0
    return weights


class MismatchMeter:
    """Collects the log-ratios of one step's policy tokens; `sums` add across ranks, `quantiles` do not."""

    def __init__(self) -> None:
        self._log_ratios: list[torch.Tensor] = []
        self.flagged = 0

    def add(self, trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor) -> None:
        """trainer, sampler, mask: [b, T] (mask 1.0 where the token has both logprobs)."""
        on = mask > 0
        self._log_ratios.append((trainer.detach().float() - sampler.float())[on].cpu())

    def sums(self) -> dict[str, float]:
        """Numerators and the token count (`mismatch_tokens`) for `finalize`."""
        r = torch.cat(self._log_ratios) if self._log_ratios else torch.zeros(0)
        r = r.clamp(-_MAX_LOG, _MAX_LOG)
        return {
            "mismatch_tokens": float(r.numel()),
            "mismatch_kl": float((torch.exp(r) - r - 1.0).sum()),
            "mismatch_ratio": float(torch.exp(r).sum()),
            "mismatch_flagged": float(self.flagged),
        }

    def quantiles(self) -> dict[str, float]:
        r = torch.cat(self._log_ratios) if self._log_ratios else torch.zeros(0)
        if not r.numel():
            return {}
        ratio = torch.exp(r.clamp(-_MAX_LOG, _MAX_LOG)).double()
        q = torch.quantile(ratio, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
        return {
            "mismatch/ratio_p05": float(q[0]),
            "mismatch/ratio_p50": float(q[1]),
            "mismatch/ratio_p95": float(q[2]),
            "mismatch/ratio_max": float(ratio.max()),
        }


def finalize(sums: dict[str, float]) -> dict[str, float]:
    """`mismatch/*` means from summed `MismatchMeter.sums` (empty when no token had a sampler logprob)."""
    n = sums.get("mismatch_tokens", 0.0)
    if not n:
        return {}
    out = {
        "mismatch/kl_k3": sums["mismatch_kl"] / n,
        "mismatch/ratio_mean": sums["mismatch_ratio"] / n,
        "mismatch/flagged_frac": sums["mismatch_flagged"] / n,
        "mismatch/tokens": n,
    }
    return {k: v for k, v in out.items() if math.isfinite(v)}
