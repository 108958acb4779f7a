"""OpenAI's Responses API (`POST /v1/responses`) as the subset agent code sends, answered through the chat
route of the same session, so a response is sampled, recorded and stitched exactly as a chat completion.

Taken: `input` as a string or a list of items (messages with text content or text parts; `function_call`
and `function_call_output` items, as a program sends `response.output` back; `reasoning` items are
skipped), `instructions` (a system message first), function `tools` and `tool_choice`,
`max_output_tokens`, `temperature`, `top_p`, `top_logprobs` with `include:
["message.output_text.logprobs"]`, `stream`. Refused with a 400 that names the field: hosted tools
(web search, file search, ...), non-text input parts, `previous_response_id` (nothing is stored: send the
conversation in `input`), `text.format` other than text (decoding is not constrained). The answer has a
`message` item (its `output_text`) when the model wrote text and one `function_call` item per tool call;
`status` is `incomplete` (`max_output_tokens`) when the token budget ended it.

A function call in `input` joins the assistant message just before it (the text and calls of one
response are one assistant turn), so a conversation sent back continues the recorded one token for
token.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trialground.gateway.api import ChatRequest
from trialground.gateway.streaming import pieces

LOGPROBS_INCLUDE = "message.output_text.logprobs"
_TEXT_PARTS = ("input_text", "output_text", "text")


class Refused(ValueError):
    """A request this route does not take; the message names the field."""


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=131072)
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    stream: bool = False
    text: dict[str, Any] | None = None
    previous_response_id: str | None = None


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise Refused(f"{where}: expected text or a list of content parts")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind == "refusal":
            out.append(str(part.get("refusal", "")))
        else:
            raise Refused(f"{where}[{j}]: content part {kind!r} is not supported (text parts only)")
    return "".join(out)


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if req.instructions:
        out.append({"role": "system", "content": req.instructions})
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        where = f"input[{i}]"
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise Refused(f"{where}.role: {role!r} is not system, developer, user or assistant")
            role = "system" if role == "developer" else role
            out.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise Refused(f"{where}: a function_call needs `name` and `call_id`")
            arguments = item.get("arguments", "{}")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": arguments},
            }
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise Refused(f"{where}: a function_call_output needs `call_id`")
            output = _text(item.get("output"), f"{where}.output")
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif kind == "reasoning":
            continue  # this server writes no reasoning items; a program may still send some back
        else:
            raise Refused(
                f"{where}.type: {kind!r} is not supported (message, function_call, function_call_output)"
            )
    if not out:
        raise Refused("input: no messages")
    return out


def _tools(req: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not req.tools:
        return None
    out = []
    for i, tool in enumerate(req.tools):
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise Refused(f"tools[{i}]: type {tool.get('type')!r} is not supported (function tools only)")
        spec = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        out.append({"type": "function", "function": spec})
    return out


def to_chat(req: ResponsesRequest) -> ChatRequest:
    """The chat request that answers `req` (`Refused` where the route does not take it)."""
    if req.previous_response_id is not None:
        raise Refused(
            "previous_response_id: this server stores no responses; send the whole conversation in `input`"
        )
    fmt = (req.text or {}).get("format") or {}
    if fmt.get("type", "text") != "text":
        raise Refused(
            f"text.format: type {fmt.get('type')!r} is not supported: this server does not constrain "
            "decoding (ask for JSON in the instructions and parse the text)"
        )
    choice: Any = req.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise Refused(f"tool_choice: {choice!r} is not auto, none, required or a function")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    logprobs = LOGPROBS_INCLUDE in (req.include or []) or bool(req.top_logprobs)
    body = {
        "model": req.model,
        "messages": _messages(req),
        "tools": _tools(req),
        "tool_choice": choice,
        "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "logprobs": logprobs,
        "top_logprobs": req.top_logprobs if logprobs else None,
    }
    return ChatRequest.model_validate({k: v for k, v in body.items() if v is not None})


def from_chat(reply: dict[str, Any], req: ResponsesRequest) -> dict[str, Any]:
    """The Responses API object for a chat answer (its first choice)."""
    choice = reply["choices"][0]
    message = choice["message"]
    output: list[dict[str, Any]] = []
    if message.get("content"):
        logprobs = (choice.get("logprobs") or {}).get("content") or []
        part = {"type": "output_text", "text": message["content"], "annotations": [], "logprobs": logprobs}
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in message.get("tool_calls") or ():
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    usage = reply["usage"]
    incomplete = choice["finish_reason"] == "length"
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "model": reply["model"],
        "instructions": req.instructions,
        "output": output,
        "tools": req.tools or [],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": True,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_output_tokens": req.max_output_tokens,
        "previous_response_id": None,
        "text": {"format": {"type": "text"}},
        "metadata": {},
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
        "policy_version": reply.get("policy_version"),
    }


def events(response: dict[str, Any], tokenizer: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """The named events of a streamed response: created, each output item added, its text or arguments
    in deltas and done, then `response.completed` (or `response.incomplete`) with the whole response."""
    seq = iter(range(1 << 62))

    def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "sequence_number": next(seq), **fields}

    start = {**response, "status": "in_progress", "output": [], "incomplete_details": None, "usage": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            empty = {**part, "text": "", "logprobs": []}
            yield event("response.content_part.added", **at, content_index=0, part=empty)
            for piece in pieces(part["text"], tokenizer):
                yield event("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
            yield event(
                "response.output_text.done",
                **at,
                content_index=0,
                text=part["text"],
                logprobs=part["logprobs"],
            )
            yield event("response.content_part.done", **at, content_index=0, part=part)
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            yield event("response.function_call_arguments.delta", **at, delta=item["arguments"])
            yield event(
                "response.function_call_arguments.done", **at, name=item["name"], arguments=item["arguments"]
            )
        yield event("response.output_item.done", output_index=index, item=item)
    done = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield event(done, response=response)
