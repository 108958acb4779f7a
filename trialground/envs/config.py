"""Configuration of environments."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EnvConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["single_turn", "tool"] = Field("single_turn", description="Environment type")
    max_turns: int = Field(8, ge=1, le=1000, description="Turns per episode (tool env)")
    max_episode_s: float = Field(300.0, gt=0, description="Wall seconds per episode")
    tool_format: Literal["json_tags", "xml"] = Field("json_tags", description="Tool-call syntax")
    observation_budget_chars: int = Field(4000, ge=64, description="Observations are cut to this size")
