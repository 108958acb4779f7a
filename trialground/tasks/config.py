"""Configuration of task sources and the task pool."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TaskSourceConfig(BaseModel):
    """One task source with its sampling weight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="Source spec: codegen, humaneval, reasoning_gym:<name>, math:FILE, FILE.jsonl, DIR")
    weight: float = Field(1.0, ge=0.0, description="Relative sampling weight")
    limit: int | None = Field(None, ge=1, description="Use at most this many tasks")


class TaskPoolConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sources: tuple[TaskSourceConfig, ...] = Field(
        (TaskSourceConfig(source="codegen"),), description="Where training tasks come from"
    )
    eval_sources: tuple[TaskSourceConfig, ...] = Field(
        (), description="Held-out evaluation tasks (default: the eval split of the training sources)"
    )
    seed: int = Field(0, description="Sampling seed")
    num_train: int = Field(2000, ge=1, le=10_000_000, description="Generated training tasks (generators)")
    num_eval: int = Field(64, ge=1, le=1_000_000, description="Generated held-out tasks (generators)")
    regression_weight: float = Field(2.0, ge=0.0, description="Weight of tasks in the regression queue")
