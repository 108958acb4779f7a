"""Configuration of monitoring."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MonitorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sinks: tuple[str, ...] = Field(("jsonl",), description="jsonl, tensorboard, wandb, mlflow")
    prometheus_port: int | None = Field(None, ge=1, le=65535, description="Serve live metrics here")
    webhook_url: str | None = Field(None, description="POST alerts here")
