"""Configuration of the training loop."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class LoopConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(10, ge=0, le=10_000_000, description="Training steps")
    batch_tasks: int = Field(8, ge=1, description="Tasks sampled per step")
    samples_per_task: int = Field(4, ge=1, le=1024, description="k: trajectories per task (group size)")
    mode: Literal["sync", "async"] = Field("sync", description="async overlaps rollouts and training")
    max_staleness: int = Field(1, ge=0, description="Policy versions a trained-on sample may lag (async)")
    dynamic_sampling: bool = Field(
        False,
        description="Drop groups without a learning signal (all rewards equal, or under two valid samples) "
        "and refill the batch with newly sampled tasks, up to dynamic_sampling_max_batches",
    )
    dynamic_sampling_max_batches: int = Field(
        4,
        ge=1,
        le=64,
        description="With dynamic_sampling: most generation batches per step (the first plus refills); a "
        "step still short of batch_tasks groups after them trains on the groups it kept",
    )
    eval_interval: int = Field(0, ge=0, description="Evaluate every N steps (0: start and end only)")
    eval_samples: int = Field(1, ge=1, description="Samples per eval task (pass@k)")
    eval_sampled: int = Field(
        0,
        ge=0,
        le=1024,
        description="At each evaluation also sample this many per held-out task at policy.sampling (the "
        "training temperature): eval_sampled/pass@1 and pass@k beside the greedy eval/* (0: off)",
    )
    probe_interval: int = Field(
        0,
        ge=0,
        description="Every N steps (and at step 0), a cheap greedy probe on the first probe_tasks eval "
        "tasks, logged as probe/pass@1: the evaluation points of the reward-evaluation check (0: off)",
    )
    probe_tasks: int = Field(16, ge=1, description="Eval tasks in each probe (a fixed subset)")
    checkpoint_interval: int = Field(
        10,
        ge=0,
        description="Checkpoint every N steps (0: only on checkpoint_every_s, at the end and on a halt); "
        "a checkpoint is written beside the old ones and renamed into place, so a run killed at any "
        "moment resumes from its newest complete one",
    )
    checkpoint_every_s: float = Field(
        900.0,
        ge=0.0,
        description="Also checkpoint after a step that ends at least this many seconds after the last "
        "checkpoint (or the start), so slow steps lose at most this much work (0: steps only)",
    )
    keep_checkpoints: int = Field(
        3,
        ge=0,
        description="Checkpoints kept: older ones are deleted after a newer one is complete (0: keep all)",
    )
    eval_feedback: bool = Field(
        False, description="Feed failed eval tasks into training's regression queue (contaminates eval)"
    )
    rollout_concurrency: int = Field(8, ge=1, description="Rollouts in flight at once")
    branch: Literal["off", "first_obs", "first_failure"] = Field(
        "off",
        description="Branching rollouts (training only; evaluation always runs independent episodes): "
        "run a task's episode once up to the branch point -- first_obs: after the first tool output; "
        "first_failure: at the first bash/python/run_tests call that fails -- then fork its sandbox into "
        "branch_k branches that continue independently and form one group; the shared prefix is part of "
        "each branch's prompt (not trained). A trunk that ends first is kept and its group is completed "
        "with independent episodes",
    )
    branch_k: int | None = Field(
        None,
        ge=2,
        le=1024,
        description="Branches per trunk, i.e. the size of one branched group (default: samples_per_task); "
        "must divide samples_per_task, which stays the number of trajectories per task",
    )

    @field_validator("branch", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML reads a bare `off` as False (YAML 1.1 booleans): that is what the user wrote.
        return "off" if value is False else value

    @model_validator(mode="after")
    def _branch_k_divides(self) -> LoopConfig:
        k = self.branch_k
        if k is not None and self.samples_per_task % k != 0:
            raise ValueError(
                f"loop.branch_k={k} must divide loop.samples_per_task={self.samples_per_task} "
                "(each task gets samples_per_task / branch_k trunks of branch_k branches)"
            )
        return self

    @property
    def branch_size(self) -> int:
        """Trajectories per branched group (`branch_k`, default `samples_per_task`)."""
        return self.branch_k or self.samples_per_task
