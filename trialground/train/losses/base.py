"""The shape every policy loss shares: the input record, the output, the plugin and its registry.

Shapes: B sequences in this (micro-)batch, T target positions. Every per-token tensor is aligned on the
*target* token: `logprobs[b, t]` is log pi(token_{t+1} | tokens_{<=t}) and `mask[b, t]` is 1 where that
token was produced by the policy (0 for prompt, observation and padding tokens).

A loss is a sum divided by the `normalizer` the trainer passes, so that gradient accumulation over
micro-batches gives exactly the full-batch loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialground.errors import ConfigError
from trialground.plugin import Plugin
from trialground.registry import Registry

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LossInput:
    """One micro-batch, as every loss receives it."""

    logprobs: torch.Tensor  # [B, T] new policy, with grad
    old_logprobs: torch.Tensor  # [B, T] behaviour policy (sampling or recomputed), no grad
    advantages: torch.Tensor  # [B] one advantage per sequence, or [B, T] one per target
    mask: torch.Tensor  # [B, T] 1.0 on policy tokens
    normalizer: float | None = None  # the whole batch's tokens (token agg) or sequences (sequence agg)
    ref_logprobs: torch.Tensor | None = None  # [B, T] reference policy, no grad (when kl_coef > 0)
    entropy: torch.Tensor | None = None  # [B, T] per-token entropy, metrics only
    is_weights: torch.Tensor | None = None  # [B, T] sampler/trainer importance weights, no grad


@dataclass
class LossOutput:
    """`loss` carries the gradient; `sums` are metric numerators over this call's policy tokens
    (divide by `tokens` to average; summing over micro-batches first keeps the averages exact)."""

    loss: torch.Tensor
    sums: dict[str, float]
    tokens: int


LossFn = Callable[[LossInput], LossOutput]


@dataclass(frozen=True)
class LossCaps:
    """What the trainer may skip for a loss."""

    zero_advantage_idle: bool
    """A sequence whose advantage is 0 adds no gradient (without a KL term), so with
    `trainer.skip_zero_advantage` the trainer leaves out its forward pass."""


@dataclass(frozen=True)
class Loss(Plugin[LossCaps]):
    """A policy loss (see `trialground.train.losses`)."""

    def build(self, config: Any) -> LossFn:
        """The loss for `config` (a `TrainerConfig`), with its `loss_params` as this loss's settings."""
        make = self.load("loss", ConfigError)
        fn: LossFn = make(config, self.settings_of(config.loss_params))
        return fn


LOSSES: Registry[Loss] = Registry("loss", Loss, ConfigError, error_kind="config")

# the `train/*` name of each metric numerator a loss may report
METRICS = {
    "pg_loss": "train/pg_loss",
    "ratio": "train/ratio_mean",
    "clipped": "train/clip_frac",
    "clipped_low": "train/clip_low_frac",
    "clipped_high": "train/clip_high_frac",
    "kl": "train/kl",
    "entropy": "train/entropy",
}


def finalize_metrics(sums: dict[str, float], tokens: int) -> dict[str, float]:
    """Token-averaged `train/*` metrics from summed `LossOutput.sums` (a plugin's own numerators are
    reported as `train/<name>`)."""
    n = max(tokens, 1)
    return {METRICS.get(k, f"train/{k}"): v / n for k, v in sums.items()}
