"""The request bodies of the OpenAI API routes the gateway answers (the fields it honours; others are
ignored, as OpenAI-compatible servers do)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# vLLM's and SGLang's constrained-decoding fields: refused, never ignored (the answer would not conform)
CONSTRAINED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")

# Seeds are passed to torch generators, which take 64-bit values: anything larger is a 400, not a 500.
MAX_SEED = 2**63 - 1


class FunctionCall(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    arguments: str = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = ""
    type: str = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message. `content` may be text or a list of text parts."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool", "ipython"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text")


class StreamOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    include_usage: bool = False


class Sampling(BaseModel):
    """Fields shared by both routes."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str | None = None
    n: int = Field(1, ge=1, le=64)
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, le=1_000_000)  # -1 and 0: off (vLLM's and SGLang's wire values)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1, le=131072)
    max_completion_tokens: int | None = Field(None, ge=1, le=131072)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: Any = None

    @model_validator(mode="after")
    def _no_constrained_decoding(self) -> Sampling:
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            raise ValueError(
                f"response_format: type {kind!r} is not supported: this server does not constrain decoding "
                "(only 'text'; ask for JSON in the prompt and parse the answer)"
            )
        asked = [name for name in CONSTRAINED if getattr(self, name) is not None]
        if asked:
            raise ValueError(f"{asked[0]}: constrained decoding is not supported by this server")
        return self

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> Sampling:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed when stream is true")
        return self

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class ChatRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(Sampling):
    """`prompt` is text or token ids (one prompt or a list of them)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1, le=131072)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
