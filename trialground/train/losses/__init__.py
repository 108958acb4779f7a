"""Policy losses: `trainer.loss` names one (or a plugin's `package.module:NAME`), `trainer.loss_params` holds
its own settings.

A loss's `factory` is `(trainer_config, settings) -> loss`, or its dotted path, called once when the
trainer is built; `loss(LossInput) -> LossOutput` is then called per micro-batch (`base.py`: the one typed
input record every loss takes). Its `LossCaps` say what the trainer may skip for it.
"""

from __future__ import annotations

from trialground.train.losses.base import LOSSES, Loss, LossCaps, LossInput, LossOutput, finalize_metrics

__all__ = ["LOSSES", "Loss", "LossCaps", "LossInput", "LossOutput", "finalize_metrics"]

LOSSES.register(
    Loss(
        "ppo_clip",
        "trialground.train.losses.ppo_clip:make",
        LossCaps(zero_advantage_idle=True),
        doc="PPO-clip with DAPO's asymmetric clip (trainer.clip_low, clip_high), loss_agg, k3 KL (kl_coef)",
    )
)
