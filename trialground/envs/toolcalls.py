"""Tool calls parsed from model text, in the formats models are trained on.

Formats (`ToolFormat`):

- ``json_tags`` — Hermes/Qwen2.5 style:
  ``<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>``.
  ``"arguments"`` may also be a JSON-encoded string (OpenAI style) and ``"parameters"`` is accepted for it.
- ``xml`` — Qwen3-Coder style: ``<function=bash><parameter=command>ls</parameter></function>``, optionally
  inside ``<tool_call>…</tool_call>``. Parameter values are raw text; one leading and one trailing newline
  are stripped so the usual one-tag-per-line layout round-trips exactly.
- ``auto`` — both, in order of appearance.

Contract: `parse_tool_calls` never raises, whatever the text holds: JSON is parsed by `plainjson.loads`,
which bounds size, nesting and number length first (a 5,000-digit integer or 5,000 nested brackets are
an `InvalidCall`, never a `ValueError` or `RecursionError`). Each call in the text becomes a `ToolCall`,
or an `InvalidCall` with a reason the model can act on; the environment answers invalid calls with an
observation and counts them. An unterminated ``<tool_call>`` (the model stopped mid-call) is an
`InvalidCall`, not silence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from trialground import plainjson

ToolFormat = Literal["json_tags", "xml", "auto"]

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION_RE = re.compile(r"<function=([^>\s]*)\s*>(.*?)(</function>|\Z)", re.DOTALL)
_PARAM_RE = re.compile(r"<parameter=([^>\s]*)\s*>(.*?)(</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call: a tool name and its arguments (JSON values)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""


@dataclass(frozen=True)
class InvalidCall:
    """Text that looked like a tool call but could not be understood; `reason` is shown to the model."""

    reason: str
    raw: str = ""
    name: str | None = None


ParsedCall = ToolCall | InvalidCall


def _strip_one_newline(text: str) -> str:
    if text.startswith("\n"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    return text


def _parse_json_body(body: str, raw: str) -> ParsedCall:
    try:
        obj = plainjson.loads(body, plainjson.TOOL_CALL)
    except plainjson.UnparsableJSON as e:
        return InvalidCall(f"tool call is not usable JSON: {e}", raw)
    if not isinstance(obj, dict):
        return InvalidCall("tool call JSON must be an object with 'name' and 'arguments'", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return InvalidCall("tool call JSON has no string 'name'", raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = plainjson.loads(args, plainjson.TOOL_CALL) if args.strip() else {}
        except plainjson.UnparsableJSON as e:
            return InvalidCall(f"'arguments' of {name!r} is a string that is not JSON ({e})", raw, name)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return InvalidCall(f"'arguments' of {name!r} must be a JSON object", raw, name)
    return ToolCall(name, args, raw)


def _parse_function(name: str, body: str, closed: bool, raw: str) -> ParsedCall:
    if not name:
        return InvalidCall("<function=...> has an empty tool name", raw)
    if not closed:
        return InvalidCall(f"<function={name}> is not closed with </function>", raw, name)
    args: dict[str, Any] = {}
    for m in _PARAM_RE.finditer(body):
        key, value, end = m.group(1), m.group(2), m.group(3)
        if not key:
            return InvalidCall(f"a <parameter=...> of {name!r} has an empty name", raw, name)
        if end != "</parameter>":
            return InvalidCall(f"<parameter={key}> of {name!r} is not closed with </parameter>", raw, name)
        if key in args:
            return InvalidCall(f"parameter {key!r} of {name!r} is given twice", raw, name)
        args[key] = _strip_one_newline(value)
    leftover = _PARAM_RE.sub("", body).strip()
    if leftover:
        return InvalidCall(f"unexpected text inside <function={name}>: {leftover[:80]!r}", raw, name)
    return ToolCall(name, args, raw)


def _parse_xml(text: str) -> list[tuple[int, ParsedCall]]:
    return [
        (m.start(), _parse_function(m.group(1), m.group(2), m.group(3) == "</function>", m.group(0)))
        for m in _FUNCTION_RE.finditer(text)
    ]


def _parse_tags(text: str, allow_xml_inside: bool) -> list[tuple[int, ParsedCall]]:
    out: list[tuple[int, ParsedCall]] = []
    for m in _TOOL_CALL_RE.finditer(text):
        raw, body = m.group(0), m.group(1).strip()
        if not raw.endswith("</tool_call>"):
            out.append((m.start(), InvalidCall("<tool_call> is not closed with </tool_call>", raw)))
        elif allow_xml_inside and body.startswith("<function="):
            out.extend((m.start() + off, call) for off, call in _parse_xml(body))
        else:
            out.append((m.start(), _parse_json_body(body, raw)))
    return out


def parse_tool_calls(text: str, fmt: ToolFormat = "auto") -> list[ParsedCall]:
    """Every tool call in `text`, in order. Never raises; text without calls gives []."""
    if fmt == "json_tags":
        found = _parse_tags(text, allow_xml_inside=False)
    elif fmt == "xml":
        # The <tool_call> wrapper is optional in this format; parse functions wherever they are.
        found = _parse_xml(text)
    else:
        found = _parse_tags(text, allow_xml_inside=True)
        outside = _TOOL_CALL_RE.sub(lambda m: " " * len(m.group(0)), text)
        found.extend(_parse_xml(outside))
    found.sort(key=lambda pair: pair[0])
    return [call for _, call in found]


def format_tool_call(name: str, arguments: dict[str, Any], fmt: ToolFormat = "json_tags") -> str:
    """The text a model would emit for this call (used in prompts and by scripted policies)."""
    if fmt == "xml":
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
