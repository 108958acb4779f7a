"""`reward.judge`: which judge (reward model) a run uses, and building it.

    reward:
      judge_sample_rate: 0.1             # share of rule-graded submissions also sent to the judge
      judge:
        kind: hf_classifier              # a local sequence-classification model directory
        path: /models/my-judge
      # or
      judge:
        kind: openai                     # any OpenAI-compatible /chat/completions endpoint
        base_url: http://127.0.0.1:8000/v1
        model: my-judge
        api_key_env: JUDGE_API_KEY       # the key is read from this environment variable, never the config

`make_judge(config)` builds the `trialground.verify.judges.judge.Judge`; a path that is not a model
directory, or an endpoint config without a model, is a `ConfigError` naming the field before the run starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trialground.errors import ConfigError
from trialground.verify.judges.judge import Judge


class JudgeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["hf_classifier", "openai"] = Field(
        description="hf_classifier: a local Hugging Face sequence-classification model (needs the train "
        "extra); openai: an OpenAI-compatible chat endpoint whose complete reply ends in a line "
        "`SCORE: x` (x a decimal in [0, 1])"
    )
    path: str | None = Field(None, description="hf_classifier: the local model directory")
    positive_label: int = Field(
        1, ge=0, description="hf_classifier: the label whose probability is the score"
    )
    max_length: int = Field(512, ge=8, le=32_768, description="hf_classifier: tokens of prompt + submission")
    base_url: str | None = Field(None, description="openai: the endpoint, e.g. http://127.0.0.1:8000/v1")
    model: str | None = Field(None, description="openai: the model name sent with each request")
    api_key_env: str | None = Field(None, description="openai: environment variable holding the API key")
    timeout_s: float = Field(
        60.0,
        gt=0.0,
        le=3600.0,
        description="openai: deadline of the whole call (connect, retry and every byte of the reply)",
    )
    max_tokens: int = Field(256, ge=1, le=32_768, description="openai: reply tokens")
    max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="openai: retries after a connection error, a 429 or a 5xx, within timeout_s "
        "(exponential backoff with jitter; Retry-After honoured)",
    )
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="A score at or above this counts as a pass")

    @model_validator(mode="after")
    def _fields_of_kind(self) -> JudgeConfig:
        if self.kind == "hf_classifier" and not self.path:
            raise ValueError("reward.judge.path is required for kind hf_classifier (a local model directory)")
        if self.kind == "openai" and (not self.base_url or not self.model):
            raise ValueError("reward.judge.base_url and reward.judge.model are required for kind openai")
        return self


def make_judge(config: JudgeConfig | None) -> Judge | None:
    """The configured judge, or None. Raises `ConfigError` naming the field that is wrong."""
    if config is None:
        return None
    if config.kind == "hf_classifier":
        from trialground.verify.judges.judge import HFClassifierJudge

        assert config.path is not None
        path = Path(config.path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"reward.judge.path: {config.path!r} is not a Hugging Face model directory (no config.json)"
            )
        return HFClassifierJudge(
            str(path), positive_label=config.positive_label, max_length=config.max_length
        )
    from trialground.verify.judges.judge import OpenAIJudge

    assert config.base_url is not None and config.model is not None
    key = None
    if config.api_key_env:
        key = os.environ.get(config.api_key_env)
        if not key:
            raise ConfigError(
                f"reward.judge.api_key_env: environment variable {config.api_key_env} is not set"
            )
    return OpenAIJudge(
        config.base_url,
        config.model,
        api_key=key,
        timeout_s=config.timeout_s,
        max_tokens=config.max_tokens,
        max_retries=config.max_retries,
    )
