"""How tool calls look in the text of each chat-template family, both ways: the text a model emits is
parsed into OpenAI `tool_calls`, and `tool_calls` given back in a conversation are rendered by the
template itself (the gateway never writes them into a prompt on its own).

Styles (a registry, keyed by name; `detect` picks one from a chat template's text):

- ``tags``: Hermes / Qwen2.5 / Qwen3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (also Qwen3-Coder's ``<function=...>`` form inside the tags);
- ``llama3``: Llama 3.1: the whole message is ``{"name": ..., "parameters": {...}}``, optionally after
  ``<|python_tag|>``;
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.

Parsing never raises: text that looks like a call but does not parse stays in `content` and is listed in
`invalid` (the gateway returns it as text, so the program sees what the model wrote).

Why not vLLM's or SGLang's parsers (`vllm/entrypoints/openai/tool_parsers/`, SGLang's function-call
detectors): they are classes of their servers, built on the server's request models and tokenizer, and
run only inside an installed vLLM or SGLang; vLLM's wheel pins its own torch (vllm 0.34.0 requires
torch==2.14.0, this project 2.13), so a CPU install here cannot carry it and they were not run side by
side with these. These parse through `trialground.plainjson` (bounded size, depth and digits: parsing
model output is total, never an exception), which the gateway's contract needs whatever parser sits
behind it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trialground import plainjson
from trialground.envs.toolcalls import InvalidCall, ToolCall, parse_tool_calls


@dataclass(frozen=True)
class Parsed:
    content: str
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    invalid: tuple[str, ...] = field(default_factory=tuple)


def _tags(text: str) -> Parsed:
    found = parse_tool_calls(text, "auto")
    calls = tuple((c.name, c.arguments) for c in found if isinstance(c, ToolCall))
    invalid = tuple(c.reason for c in found if isinstance(c, InvalidCall))
    if not calls:
        return Parsed(text, (), invalid)
    content = re.sub(r"<tool_call>.*?(</tool_call>|\Z)", "", text, flags=re.DOTALL)
    content = re.sub(r"<function=[^>]*>.*?(</function>|\Z)", "", content, flags=re.DOTALL)
    return Parsed(content.strip(), calls, invalid)


def _json_call(obj: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = plainjson.loads(args, plainjson.TOOL_CALL) if args.strip() else {}
        except plainjson.UnparsableJSON:
            return None
    return (obj["name"], args) if isinstance(args, dict) else None


def _llama3(text: str) -> Parsed:
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>") :].strip()
    if not body.startswith("{"):
        return Parsed(text)
    calls = []
    for part in body.split(";") if ";" in body and not _loads(body) else [body]:
        call = _json_call(_loads(part.strip()))
        if call is None:
            return Parsed(text, (), ("the message looks like a tool call but is not one JSON call",))
        calls.append(call)
    return Parsed("", tuple(calls))


def _mistral(text: str) -> Parsed:
    head, marker, tail = text.partition("[TOOL_CALLS]")
    if not marker:
        return Parsed(text)
    obj = _loads(tail.strip())
    items = obj if isinstance(obj, list) else [obj]
    calls = [_json_call(o) for o in items]
    if not items or any(c is None for c in calls):
        return Parsed(text, (), ("[TOOL_CALLS] is not followed by a JSON list of calls",))
    return Parsed(head.strip(), tuple(c for c in calls if c is not None))


def _loads(text: str) -> Any:
    try:
        return plainjson.loads(text, plainjson.TOOL_CALL)
    except plainjson.UnparsableJSON:
        return None


STYLES: dict[str, Callable[[str], Parsed]] = {"tags": _tags, "llama3": _llama3, "mistral": _mistral}
# The text each style's models emit for one call (for tests, the conformance check, scripted policies).
EMIT: dict[str, Callable[[str, dict[str, Any]], str]] = {
    "tags": lambda n, a: "<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>",
    "llama3": lambda n, a: json.dumps({"name": n, "parameters": a}),
    "mistral": lambda n, a: "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a}]),
}


def detect(template: str) -> str:
    """The style a chat template's own text implies (`tags` when it names none)."""
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "ipython" in template or "<|python_tag|>" in template:
        return "llama3"
    return "tags"


END_OF_TURN = ("<|eom_id|>", "<|eot_id|>", "<|im_end|>", "</s>")


def strip_end(text: str, tokenizer: Any) -> str:
    """`text` without the end-of-turn tokens it ends with (the eos, Llama's <|eom_id|>, ...); tool tags
    stay, special or not."""
    specials = [str(tokenizer.eos_token or ""), *END_OF_TURN]
    text = text.rstrip()
    while True:
        end = next((s for s in specials if s and text.endswith(s)), None)
        if end is None:
            return text
        text = text[: -len(end)].rstrip()


def parse(style: str, text: str) -> Parsed:
    if style not in STYLES:
        raise ValueError(f"unknown tool-call style {style!r}: expected one of {sorted(STYLES)}")
    return STYLES[style](text)
