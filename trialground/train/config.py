"""Configuration of the trainer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TrainerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    algorithm: Literal["grpo", "dr_grpo", "rloo"] = Field("grpo", description="Group advantage estimator")
    lr: float = Field(1e-4, gt=0.0, le=1.0, description="Learning rate")
    clip_low: float = Field(0.2, ge=0.0, le=1.0, description="PPO clip range below 1")
    clip_high: float = Field(0.28, ge=0.0, le=10.0, description="PPO clip range above 1 (DAPO clip-higher)")
    kl_coef: float = Field(0.0, ge=0.0, description="KL penalty to the reference policy (0 = off)")
    loss_agg: Literal["token", "sequence"] = Field("token", description="Loss aggregation")
    epochs: int = Field(1, ge=1, le=16, description="Optimisation passes over each batch")
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward/backward (grad accumulation)")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping norm")
    lora_rank: int = Field(0, ge=0, description="LoRA rank via peft (0 = full fine-tuning)")
    overlong_penalty: float = Field(0.0, ge=0.0, description="Penalty for responses cut at max length")
    seed: int = Field(0, description="torch seed")
