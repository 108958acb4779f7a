"""Configuration of the environment pool."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class PoolConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["local", "ray"] = Field("local", description="Where sandboxes live")
    max_active: int = Field(4, ge=1, le=100_000, description="Environments in use at once")
    min_warm: int = Field(0, ge=0, description="Idle environments kept ready")
    max_queue: int = Field(1024, ge=0, description="Waiters beyond which acquire fails fast")
    acquire_timeout_s: float = Field(60.0, gt=0, description="Longest wait for an environment")
    max_uses: int = Field(50, ge=1, description="Recycle an environment after this many uses")
    lease_s: float = Field(600.0, gt=0, description="Reclaim an environment never released after this")
    idle_ttl_s: float = Field(120.0, gt=0, description="Reap environments idle this long")
    ray_address: str | None = Field(None, description="Ray cluster address (None: local ray.init())")
