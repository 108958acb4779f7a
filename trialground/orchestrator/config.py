"""Configuration of the training loop."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LoopConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(10, ge=0, le=10_000_000, description="Training steps")
    batch_tasks: int = Field(8, ge=1, description="Tasks sampled per step")
    samples_per_task: int = Field(4, ge=1, le=1024, description="k: trajectories per task (group size)")
    mode: Literal["sync", "async"] = Field("sync", description="async overlaps rollouts and training")
    max_staleness: int = Field(1, ge=0, description="Policy versions a trained-on sample may lag (async)")
    dynamic_sampling: bool = Field(False, description="Drop zero-variance groups and refill")
    eval_interval: int = Field(0, ge=0, description="Evaluate every N steps (0: start and end only)")
    eval_samples: int = Field(1, ge=1, description="Samples per eval task (pass@k)")
    checkpoint_interval: int = Field(0, ge=0, description="Checkpoint every N steps (0: end only)")
    eval_feedback: bool = Field(
        False, description="Feed failed eval tasks into training's regression queue (contaminates eval)"
    )
    rollout_concurrency: int = Field(8, ge=1, description="Rollouts in flight at once")
