"""Configuration of the environment pool."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trialground.plugin import FrozenParams, Params, section_validators


class PoolConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(
        "local",
        description="Where sandboxes live (trialground.pool.backends): local (this process), ray (Ray "
        "actors; cluster: ray sets it), or a plugin's 'package.module:NAME'",
    )
    params: Params = Field(
        default_factory=FrozenParams,
        description="The backend's own settings, validated against its settings model (a plugin's; the "
        "built-in backends take theirs from the fields below)",
    )
    max_active: int = Field(4, ge=1, le=100_000, description="Environments in use at once")
    reseed: bool | Literal["auto"] = Field(
        "auto",
        description="With no idle sandbox of the task, reuse the least recently used idle sandbox of another "
        "task (restored, emptied inside the sandbox, seeded with this task's files) before making a new one: "
        "true always, false never, auto unless a reseed measures over 1.5x as long as making a sandbox (one "
        "chance in 32 is still reseeded then, to notice when that changes)",
    )
    min_warm: int = Field(0, ge=0, description="Idle environments kept ready")
    max_queue: int = Field(1024, ge=0, description="Waiters beyond which acquire fails fast")
    acquire_timeout_s: float = Field(60.0, gt=0, description="Longest wait for an environment")
    max_uses: int = Field(50, ge=1, description="Recycle an environment after this many uses")
    lease_s: float = Field(600.0, gt=0, description="Reclaim an environment never released after this")
    idle_ttl_s: float = Field(120.0, gt=0, description="Reap environments idle this long")
    ray_address: str | None = Field(None, description="Ray cluster address (None: local ray.init())")
    max_idle: int = Field(
        64, ge=0, le=1_000_000, description="Warm idle sandboxes kept at most (oldest evicted first)"
    )
    health_check: Literal["off", "alive", "exec"] = Field(
        "alive",
        description="Check a warm sandbox before handing it out: alive = the backend's cheap liveness probe "
        "(an exec of `true` where it has none), exec = always run `true`, off = restore only",
    )
    create_retries: int = Field(1, ge=0, le=10, description="Extra attempts when creating a sandbox fails")
    maintenance_interval_s: float = Field(
        1.0, gt=0, le=3600, description="How often leases are checked and idle sandboxes reaped"
    )
    autoscale: bool = Field(False, description="Adapt max_active to generation vs environment rates")
    min_active: int = Field(1, ge=1, le=100_000, description="Lower bound of max_active when autoscaling")
    max_active_bound: int = Field(
        256, ge=1, le=100_000, description="Upper bound of max_active when autoscaling"
    )
    autoscale_interval_s: float = Field(10.0, gt=0, description="Seconds between autoscaler decisions")
    ray_workers: int = Field(2, ge=1, le=10_000, description="Sandbox worker actors (ray backend)")
    ray_worker_cpus: float = Field(1.0, gt=0, le=256, description="CPUs reserved per worker actor")
    ray_call_timeout_s: float = Field(
        120.0, gt=0, description="A worker call slower than this (beyond its own limits) is a lost worker"
    )

    _known_backend, _params_of_backend = section_validators(
        "backend", "trialground.pool.backends:BACKENDS", "pool."
    )

    @model_validator(mode="after")
    def _bounds(self) -> PoolConfig:
        if self.min_active > self.max_active_bound:
            raise ValueError("min_active must be <= max_active_bound")
        return self
