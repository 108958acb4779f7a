"""OpenEnv's wire format as trialground's server speaks it: the action, observation and state bodies, the
reset and step requests, and the JSON-RPC reply of `POST /mcp` (`openenv.py` serves them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trialground import plainjson

# The OpenEnv HTTP API this server speaks (OpenAPI info.version; `openenv validate URL` reads its profile,
# openenv-http/1.x, from it); trialground's own version is in /metadata.
OPENENV_API_VERSION = "1.0.0"


class EnvAction(BaseModel):
    """One step: the model's text, or one structured tool call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message: str | None = Field(None, description="The model's text, tool calls in the server's format")
    tool: str | None = Field(None, description="Or: one tool to call (bash, python, read_file, ...)")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored (OpenEnv's Action field)")

    @model_validator(mode="after")
    def _one_of(self) -> EnvAction:
        if (self.message is None) == (self.tool is None):
            raise ValueError("give exactly one of `message` (the model's text) or `tool` (+ `arguments`)")
        if self.message is not None and self.arguments:
            raise ValueError("`arguments` go with `tool`, not with `message`")
        return self


class EnvObservation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    turn: int
    task_id: str
    episode_id: str
    counters: dict[str, int] = Field(default_factory=dict)
    finish_reason: str | None = None
    verdict: dict[str, Any] | None = None
    reward_components: dict[str, float] | None = Field(
        None, description="At a graded end: outcome and each shaping component's raw value"
    )
    error: dict[str, Any] | None = None


class EnvState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    episode_id: str | None = None
    step_count: int = 0
    task_id: str | None = None
    turn: int = 0
    done: bool = False
    finish_reason: str = ""
    counters: dict[str, int] = Field(default_factory=dict)


class ResetRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int | None = Field(None, ge=0)
    episode_id: str | None = Field(None, min_length=1, max_length=255)
    task_id: str | None = None


class StepRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    action: EnvAction
    episode_id: str = Field(min_length=1, max_length=255, description="What /reset returned")
    timeout_s: float | None = Field(None, gt=0, description="Accepted; the tools' own limits apply")
    request_id: str | None = Field(None, max_length=255)


def mcp_reply(body: bytes) -> dict[str, Any]:
    """The JSON-RPC 2.0 answer of `POST /mcp`: OpenEnv's reply for an environment without MCP tools (its
    tools are played through reset/step episodes), errors for anything malformed."""

    def error(code: int, message: str, request_id: Any = None) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": request_id}

    try:
        request = plainjson.loads(body, plainjson.REQUEST_BODY)
    except plainjson.UnparsableJSON as exc:
        return error(-32700, f"Parse error: {exc}")
    if not isinstance(request, dict):
        return error(-32600, "Invalid Request: a JSON-RPC request is a JSON object")
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
        request_id = None
    method = request.get("method")
    if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
        return error(-32600, 'Invalid Request: needs "jsonrpc": "2.0" and a "method"', request_id)
    if method.startswith("tools/"):
        return error(
            -32603,
            "Environment does not support MCP: its tools are called inside episodes (the /ws session, or "
            "POST /reset and /step)",
            request_id,
        )
    return error(-32601, f"Method not found: {method}", request_id)
