"""`reward.judge`: which judge (reward model) a run uses, and building it, through the registry of judge
kinds.

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
        max_submission_chars: 32000      # a longer submission fails (score 0) without a judge call

`kind` is a registered `JudgeKind` (`JUDGES`) or a plugin's dotted path `package.module:NAME`; every other
field but `threshold` belongs to the kind and is validated by its own params model when the config loads
(`JudgeConfig.params` is the typed object). `make_judge(config)` builds the
`trialground.verify.judges.judge.Judge`; a path that is not a model directory, or a missing or misspelt
field, is a `ConfigError` naming the field before the run starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from trialground.errors import ConfigError
from trialground.plugin import Plugin, Requirement
from trialground.registry import Registry
from trialground.verify.judges.judge import Judge


class HFClassifierParams(BaseModel):
    """`kind: hf_classifier`: a local Hugging Face sequence-classification model (needs the train extra)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1, description="The local model directory")
    positive_label: int = Field(1, ge=0, description="The label whose probability is the score")
    max_length: int = Field(512, ge=8, le=32_768, description="Tokens of prompt + submission")


class OpenAIJudgeParams(BaseModel):
    """`kind: openai`: an OpenAI-compatible chat endpoint whose complete reply ends in a line `SCORE: x`
    (x a decimal in [0, 1])."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(min_length=1, description="The endpoint, e.g. http://127.0.0.1:8000/v1")
    model: str = Field(min_length=1, description="The model name sent with each request")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key")
    timeout_s: float = Field(
        60.0, gt=0.0, le=3600.0, description="Deadline of the whole call (connect, retry and every byte)"
    )
    max_tokens: int = Field(256, ge=1, le=32_768, description="Reply tokens")
    max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="Retries after a connection error, a 429 or a 5xx, within timeout_s (exponential backoff "
        "with jitter; Retry-After honoured)",
    )
    max_submission_chars: int = Field(
        32_000,
        ge=1,
        le=10_000_000,
        description="Longest submission sent to the judge, in characters; a longer one fails (score 0, flag "
        "judge_input_too_long) without a call. Keep it within the judge model's context",
    )


JudgeBuild = Callable[[Any], Judge]


@dataclass(frozen=True)
class JudgeCaps:
    """What the run may ask of a judge kind."""

    local_model: bool
    """It loads a model into this process (the trainer's device and memory are shared with it)."""


@dataclass(frozen=True)
class JudgeKind(Plugin[JudgeCaps]):
    """A judge kind: `name` (what `reward.judge.kind` says), `settings` (its typed params: every field of
    `reward.judge` but `kind` and `threshold`), `requires`, and `factory`, `(settings) -> Judge` or its
    dotted path (resolved on first use)."""

    def function(self) -> JudgeBuild:
        build: JudgeBuild = self.load("judge kind", ConfigError)
        return build


JUDGES: Registry[JudgeKind] = Registry("judge kind", JudgeKind, ConfigError, error_kind="config")


class JudgeConfig(BaseModel):
    """`reward.judge`: `kind`, `threshold`, and the kind's own fields (validated by its params model)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str = Field(
        min_length=1,
        description="hf_classifier: a local Hugging Face sequence-classification model (needs the train "
        "extra; path, positive_label, max_length); openai: an OpenAI-compatible chat endpoint whose "
        "complete reply ends in a line `SCORE: x` (base_url, model, api_key_env, timeout_s, max_tokens, "
        "max_retries, max_submission_chars); or a plugin `package.module:NAME`",
    )
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="A score at or above this counts as a pass")
    _params: BaseModel | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _kind_params(self) -> JudgeConfig:
        try:
            kind = JUDGES.lookup(self.kind)
            self._params = JUDGES.params(
                kind.settings, self.model_extra or {}, where=f"judge kind {kind.name!r} "
            )
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return self

    @property
    def params(self) -> BaseModel:
        """The kind's validated params (an instance of its params model)."""
        assert self._params is not None
        return self._params


def make_judge(config: JudgeConfig | None) -> Judge | None:
    """The configured judge, or None. Raises `ConfigError` naming the field that is wrong."""
    if config is None:
        return None
    return JUDGES.lookup(config.kind).function()(config.params)


def _hf_classifier(params: HFClassifierParams) -> Judge:
    from trialground.verify.judges.judge import HFClassifierJudge

    path = Path(params.path).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"reward.judge.path: {params.path!r} is not a Hugging Face model directory (no config.json)"
        )
    return HFClassifierJudge(str(path), positive_label=params.positive_label, max_length=params.max_length)


def _openai(params: OpenAIJudgeParams) -> Judge:
    from trialground.verify.judges.judge import OpenAIJudge

    key = None
    if params.api_key_env:
        key = os.environ.get(params.api_key_env)
        if not key:
            raise ConfigError(
                f"reward.judge.api_key_env: environment variable {params.api_key_env} is not set"
            )
    return OpenAIJudge(
        params.base_url,
        params.model,
        api_key=key,
        timeout_s=params.timeout_s,
        max_tokens=params.max_tokens,
        max_retries=params.max_retries,
        max_submission_chars=params.max_submission_chars,
    )


for _kind in (
    JudgeKind(
        "hf_classifier",
        _hf_classifier,
        JudgeCaps(local_model=True),
        settings=HFClassifierParams,
        requires=(Requirement(module="transformers", extra="train", why="it loads the judge model"),),
        doc="a local sequence-classification model",
    ),
    JudgeKind(
        "openai",
        _openai,
        JudgeCaps(local_model=False),
        settings=OpenAIJudgeParams,
        doc="an OpenAI-compatible chat endpoint",
    ),
):
    JUDGES.register(_kind)
