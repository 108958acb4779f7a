"""Configuration of the policy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trialground.policy.base import SamplingParams


class PolicyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["hf", "vllm", "openai", "scripted"] = Field("hf", description="Generation backend")
    model: str = Field("tiny", description="'tiny' (bundled), a local HF model directory, or a model name")
    device: str = Field("cpu", description="torch device for the hf backend")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype")
    sampling: SamplingParams = Field(default_factory=SamplingParams, description="Training-time sampling")
    eval_sampling: SamplingParams = Field(
        default_factory=lambda: SamplingParams(temperature=0.0), description="Evaluation sampling"
    )
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (openai backend)")
    max_context_tokens: int = Field(2048, ge=16, description="Context budget of one episode")
