"""Configuration of environments."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EnvConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["single_turn", "tool"] = Field("single_turn", description="Environment type")
    max_turns: int = Field(8, ge=1, le=1000, description="Turns per episode (tool env)")
    max_episode_s: float = Field(300.0, gt=0, description="Wall seconds per episode")
    tool_format: Literal["json_tags", "xml", "auto"] = Field(
        "json_tags", description="Tool-call syntax: json_tags, xml, or auto (both)"
    )
    observation_budget_chars: int = Field(4000, ge=64, description="Observations are cut to this size")
    tool_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Wall seconds of one bash/python/run_tests call (capped by episode)"
    )
    navigation_tools: bool = Field(
        False,
        description="List search and read_lines in the prompt's tool list (they are callable either way); "
        "on for tasks whose workspace is far larger than the context",
    )
    max_calls_per_turn: int = Field(
        4, ge=1, le=64, description="Tool calls executed per model turn; further ones are invalid"
    )
    grade_on_limit: bool = Field(
        True, description="At the turn or time limit, grade the workspace as it is (else: no reward)"
    )
    workspace_digest: bool = Field(
        True,
        description="Tool env: hash the workspace at the start of every episode (in the sandbox; logged "
        "per trajectory, so k samples of a task can be shown to start from the same bytes)",
    )
    observations: Literal["full", "blank", "shuffled"] = Field(
        "full",
        description="Tool env feedback ablation: full (real tool outputs), blank (each output replaced by a "
        "fixed placeholder), shuffled (by a real output from another task); tools and grading unchanged",
    )
    python: str = Field(
        "python3", min_length=1, description="Python inside the sandbox (python/run_tests tools)"
    )
