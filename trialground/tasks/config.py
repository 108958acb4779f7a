"""Configuration of task sources and the task pool."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TaskSourceConfig(BaseModel):
    """One task source with its sampling weight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(
        description="Source spec: codegen, humaneval, reasoning_gym:<name>, math, math:FILE, data, ops, "
        "FILE.jsonl, DIR"
    )
    weight: float = Field(1.0, ge=0.0, le=1e6, description="Relative sampling weight of the whole source")
    limit: int | None = Field(None, ge=1, description="Use at most this many tasks")
    general: bool = Field(
        False,
        description="General tasks (e.g. broad reasoning) are mixed in at `general_ratio` of each batch",
    )


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
    regression_files: tuple[str, ...] = Field(
        (),
        description="Task files (e.g. written by `trialground tasks from-failures`) put in the run's "
        "regression queue when it starts (reason online_failure)",
    )
    exclude_files: tuple[str, ...] = Field(
        (),
        description="Files of task ids never sampled (one a line, '# reason' allowed; written by "
        "`trialground tasks audit --exclude-out`): those tasks are dropped from training and evaluation",
    )
    regression_weight: float = Field(
        2.0,
        ge=0.0,
        le=1e6,
        description="Sampling weight of a task in the regression queue, x its normal weight",
    )
    regression_passes: int = Field(
        1, ge=1, le=1000, description="Passes in training after which a task leaves the regression queue"
    )
    requeue_pass_rate: float | None = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="A training task whose pass rate was at least this and whose whole group then fails "
        "(the policy forgot it) goes to the regression queue; null: only flagged tasks are queued",
    )
    general_ratio: float = Field(
        0.0, ge=0.0, le=1.0, description="Expected fraction of each batch drawn from sources marked general"
    )
    domain_weights: dict[str, float] = Field(
        default_factory=dict, description="Extra weight per task domain (code, math, data, ops...), default 1"
    )
    ema_alpha: float = Field(
        0.2, gt=0.0, le=1.0, description="Smoothing of the per-task pass rate: p <- (1-a) p + a * passed"
    )
    band_min_attempts: int = Field(
        4, ge=1, le=10_000, description="Attempts before a task is put in the easy or hard band"
    )
    easy_threshold: float = Field(
        0.9, ge=0.0, le=1.0, description="Pass rate at or above which a task is easy"
    )
    hard_threshold: float = Field(
        0.1, ge=0.0, le=1.0, description="Pass rate at or below which a task is hard"
    )
    easy_weight: float = Field(0.2, ge=0.0, le=100.0, description="Weight factor of always-solved tasks")
    hard_weight: float = Field(0.3, ge=0.0, le=100.0, description="Weight factor of never-solved tasks")
    new_weight: float = Field(1.0, ge=0.0, le=100.0, description="Weight factor of tasks not yet banded")
    learning_weight: float = Field(1.0, ge=0.0, le=100.0, description="Weight factor of tasks in between")

    @model_validator(mode="after")
    def _bands_ordered(self) -> TaskPoolConfig:
        if self.hard_threshold >= self.easy_threshold:
            raise ValueError("hard_threshold must be below easy_threshold")
        if any(w < 0 for w in self.domain_weights.values()):
            raise ValueError("domain_weights must be >= 0")
        return self
