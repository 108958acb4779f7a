"""Configuration of the composite reward."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RewardConfig(BaseModel):
    """outcome gate + shaping: 0 when the outcome fails, else 1 + w_p*process - w_r*redundant."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    process_weight: float = Field(0.2, ge=0.0, le=10.0, description="Weight of process_score in [0, 1]")
    redundancy_weight: float = Field(0.01, ge=0.0, le=10.0, description="Penalty per redundant action")
    hack_action: Literal["zero", "penalty", "drop"] = Field(
        "zero", description="What a hack flag does to the trajectory"
    )
    hack_penalty: float = Field(1.0, ge=0.0, description="Subtracted when hack_action=penalty")
