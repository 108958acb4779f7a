"""Messages to prompt ids, token-exactly across the calls of one episode.

A call whose messages are an earlier call's messages plus one of the assistant messages the gateway
returned for it (compared by role, text and tool calls, never by ids the program may rewrite), plus new
messages, gets that call's prompt ids + the ids that were sampled + the ids of the new messages as the
chat template renders them after the assistant turn (its closing marker, unless the model emitted it, then
each new message and the generation prompt). Nothing the model sampled is re-tokenised. Any other
conversation -- the first call, a history the program truncated or edited, or one the template renders
differently once more turns follow (Qwen3 strips earlier reasoning) -- is rendered whole; stitching
(`stitch.py`) then starts a new segment there.

What a message says is data, as an observation is in a tool environment (`rollout.chat.ChatRenderer`):
the template's own text is encoded with its special-token markers, every string a message carries (its
text, tool-call names, arguments and ids, its name) as plain text. A `<|im_end|>` in a tool result, in a
file the program read or in the model's own text echoed back stays characters and never ends a turn
(`Renderer.split`).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trialground.gateway.api import Message
from trialground.rollout.chat import plain_ids

_SENTINEL = "\u2063TG-GATEWAY\u2063"
Canon = tuple[Any, ...]
# A piece of a render: its text, and whether it is message data (plain text) rather than template text.
Span = tuple[str, bool]
# Forms in which templates write a message's string: verbatim, trimmed, after the last `</think>` (Qwen3
# drops the reasoning of earlier turns), JSON-escaped (`tojson` of tool-call arguments; HF's tojson keeps
# non-ASCII, jinja's escapes it).
_FORMS: tuple[Callable[[str], str], ...] = (
    lambda v: v,
    str.strip,
    lambda v: v.split("</think>")[-1].lstrip("\n"),
    lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    lambda v: json.dumps(v)[1:-1],
)

log = logging.getLogger(__name__)


def canonical(message: Message | Mapping[str, Any]) -> Canon:
    """What identifies a message when a program sends its history back: role, text, tool calls."""
    m = message if isinstance(message, Message) else Message.model_validate(message)
    calls = tuple(
        (c.function.name, json.dumps(_arguments(c.function.arguments), sort_keys=True))
        for c in m.tool_calls or ()
    )
    return (m.role, m.text().strip(), calls)


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return raw


@dataclass(frozen=True)
class Sampled:
    """One choice a call returned: the assistant message as the program will send it back, and its ids."""

    message: Canon
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Turn:
    """A finished call, as later calls may continue it."""

    messages: tuple[Canon, ...]
    prompt_ids: tuple[int, ...]
    choices: tuple[Sampled, ...]


class Renderer:
    """Renders conversations with one tokenizer's chat template. `tool_role` is the role `tool` messages
    are rendered in (a template without a tool role: the role its model reads tool output in)."""

    def __init__(self, tokenizer: Any, *, tool_role: str = "tool") -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; the gateway's chat route needs one")
        self.tokenizer = tokenizer
        self.tool_role = tool_role
        template = tokenizer.chat_template
        self.template_text = template if isinstance(template, str) else " ".join(map(str, template.values()))
        self.takes_tools = "tools" in self.template_text
        self._close: list[int] | None = None
        self._specials: tuple[list[str], re.Pattern[str] | None] | None = None
        self.fallback_renders = 0  # renders split at special-token strings only (see `split`)

    def template_messages(
        self, messages: Sequence[Message], sub: Callable[[str], str] = str
    ) -> list[dict[str, Any]]:
        """The messages as the template reads them, `sub` applied to every string they carry (text,
        tool-call ids, names and arguments, keys included; never a role)."""
        out = []
        for m in messages:
            d: dict[str, Any] = {
                "role": self.tool_role if m.role == "tool" else m.role,
                "content": sub(m.text()),
            }
            if m.tool_calls:
                d["tool_calls"] = [
                    {
                        "id": sub(c.id),
                        "type": "function",
                        "function": {
                            "name": sub(c.function.name),
                            "arguments": _strings(_arguments(c.function.arguments), sub),
                        },
                    }
                    for c in m.tool_calls
                ]
            if m.tool_call_id:
                d["tool_call_id"] = sub(m.tool_call_id)
            if m.name:
                d["name"] = sub(m.name)
            out.append(d)
        return out

    def render(
        self,
        messages: Sequence[Message],
        *,
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> str:
        return self._apply(self.template_messages(messages), generation_prompt, tools)

    def _apply(
        self,
        messages: list[dict[str, Any]],
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> str:
        extra = {"tools": [dict(t) for t in tools]} if tools and self.takes_tools else {}
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **extra
        )
        if not isinstance(text, str):
            raise ValueError(f"apply_chat_template returned {type(text).__name__}, not text")
        return text

    def encode(self, text: str) -> list[int]:
        """Ids of template text: its special-token markers become their ids."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_plain(self, text: str) -> list[int]:
        """Ids of message data: special-token strings in it are split into ordinary tokens."""
        return plain_ids(self.tokenizer, text)

    def encode_spans(self, spans: Sequence[Span]) -> list[int]:
        ids: list[int] = []
        for text, data in _merged(spans):
            ids += self.encode_plain(text) if data else self.encode(text)
        return ids

    def split(
        self,
        messages: Sequence[Message],
        *,
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> tuple[str, list[Span]]:
        """The render, and the spans (template text, message data) that join to exactly it.

        The template is rendered a second time with every string the messages carry replaced by a
        placeholder holding a fresh random nonce; its text between placeholders is the template's own
        (nothing a message says can reach it). The real render must then be that text with each
        placeholder replaced by its string in one of the forms templates write (`_FORMS`), else the
        template writes a string some other way or branches on what it says.

        Then, the fallback: only the special-token strings inside the messages' strings are replaced
        by placeholders, the render encoded as it is except that each of those is plain text. No message
        forges a marker either way; the ids at the edges of such a string may differ from a tool
        environment's for the same text, and such renders are counted (`fallback_renders`). A template
        that mangles even those placeholders, or whose render holds more markers than it writes with a
        placeholder for every string (it made one of a message's text: `| lower` of `<|END|>`), is
        refused (ValueError, a 400 to the program) rather than encoded with markers parsed: nothing tells
        the template's markers from the message's then, and a message must never forge a turn.
        """
        real = self.render(messages, generation_prompt=generation_prompt, tools=tools)
        nonce = secrets.token_hex(8)
        values: list[str] = []

        def placeholder(value: str) -> str:
            if not value:
                return value  # templates test emptiness (`if m.content`): an empty string stays one
            values.append(value)
            return f"TGPH{nonce}N{len(values) - 1}E"

        try:
            marked = self._apply(self.template_messages(messages, placeholder), generation_prompt, tools)
        except Exception:  # a template that checks what a message says (an id's length) refuses them
            marked = None
        if marked is not None:
            spans = _align(real, re.split(f"TGPH{nonce}N(\\d+)E", marked), values)
            if spans is not None:
                return real, spans
        limit = None if marked is None else self._markers(marked)
        spans = self._split_specials(messages, generation_prompt, tools, real, limit)
        if spans is None:
            raise ValueError(
                "the chat template rewrites message text into or out of special-token strings; it cannot "
                "be rendered without that text acting as the template's own markers"
            )
        self.fallback_renders += 1
        log.debug("message strings split at special-token text only (%d renders)", self.fallback_renders)
        return real, spans

    def _split_specials(
        self,
        messages: Sequence[Message],
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        real: str,
        limit: int | None,
    ) -> list[Span] | None:
        """The fallback of `split`: spans of `real` with each special-token string of a message as data.
        None when the template mangles those strings' placeholders, or when the render holds more
        markers than the template writes with placeholders for all strings (`limit`): a template that
        makes markers of a message's text (`| lower` of `<|END|>`)."""
        specials, found = self._special_re()
        strings: list[str] = []

        def collect(value: str) -> str:
            strings.append(value)
            return value

        self.template_messages(messages, collect)
        spans: list[Span] = [(real, False)]
        if found is not None and any(found.search(v) for v in strings):
            nonce = secrets.token_hex(8)
            index = {s: i for i, s in enumerate(specials)}

            def placeholder(value: str) -> str:
                return found.sub(lambda m: f"TGSP{nonce}N{index[m[0]]}E", value)

            try:
                marked = self._apply(self.template_messages(messages, placeholder), generation_prompt, tools)
            except Exception:
                return None
            parts = re.split(f"TGSP{nonce}N(\\d+)E", marked)
            spans = [(specials[int(p)], True) if i % 2 else (p, False) for i, p in enumerate(parts)]
            if "".join(t for t, _ in spans) != real:
                return None
        if limit is not None and sum(self._markers(t) for t, data in spans if not data) > limit:
            return None
        return spans

    def special_strings(self) -> list[str]:
        """The special-token strings a template encode turns into their ids, longest first."""
        return list(self._special_re()[0])

    def _markers(self, text: str) -> int:
        """How many special-token strings `text` holds."""
        found = self._special_re()[1]
        return 0 if found is None else len(found.findall(text))

    def _special_re(self) -> tuple[list[str], re.Pattern[str] | None]:
        """The special-token strings a template encode turns into their ids (longest first), and a
        pattern finding them (None when the tokenizer has none)."""
        if self._specials is None:
            added = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
            names = {str(t.content) for t in added.values() if getattr(t, "special", False)}
            names |= {str(s) for s in getattr(self.tokenizer, "all_special_tokens", None) or []}
            specials = sorted((s for s in names if s), key=lambda s: (-len(s), s))
            found = re.compile("|".join(map(re.escape, specials))) if specials else None
            self._specials = (specials, found)
        return self._specials

    def close_ids(self) -> list[int]:
        """The ids that end an assistant turn in this template (e.g. `<|im_end|>\\n`)."""
        if self._close is None:
            msgs = [Message(role="user", content="q"), Message(role="assistant", content=_SENTINEL)]
            head = self.render(msgs, generation_prompt=False, tools=None)
            close = head[head.rindex(_SENTINEL) + len(_SENTINEL) :] if _SENTINEL in head else ""
            self._close = self.encode(close) if close else []
        return self._close

    def prompt(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        history: Sequence[Turn],
    ) -> list[int]:
        """Prompt ids for `messages`: continued from the latest turn of `history` they extend, else whole."""
        canon = tuple(canonical(m) for m in messages)
        for turn in reversed(history):
            ids = self._continue(turn, canon, messages, tools)
            if ids is not None:
                return ids
        return self.encode_spans(self.split(messages, generation_prompt=True, tools=tools)[1])

    def _continue(
        self,
        turn: Turn,
        canon: tuple[Canon, ...],
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        j = len(turn.messages)
        if len(canon) <= j + 1 or canon[:j] != turn.messages:
            return None
        chosen = next((c for c in turn.choices if c.message == canon[j]), None)
        if chosen is None:
            return None
        head = self.render(messages[: j + 1], generation_prompt=False, tools=tools)
        full, spans = self.split(messages, generation_prompt=True, tools=tools)
        if not full.startswith(head):
            return None  # the template renders the earlier turns differently now: a rewrite
        rest = _after(spans, len(head))
        if rest is None:
            return None  # the earlier turns would end inside a message's text: rendered whole instead
        close = self.close_ids()
        if close and chosen.token_ids and chosen.token_ids[-1] == close[0]:
            close = close[1:]  # the model's own end-of-turn token is the marker's first token
        return [*turn.prompt_ids, *chosen.token_ids, *close, *self.encode_spans(rest)]


def _strings(value: Any, sub: Callable[[str], str]) -> Any:
    """`value` (parsed tool-call arguments) with `sub` applied to every string in it, keys included."""
    if isinstance(value, str):
        return sub(value)
    if isinstance(value, dict):
        return {sub(k) if isinstance(k, str) else k: _strings(v, sub) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, sub) for v in value]
    return value


def _align(real: str, parts: Sequence[str], values: Sequence[str]) -> list[Span] | None:
    """Spans of `real` from a placeholder render split at its placeholders ([text, index, text, ...]),
    or None when `real` is not that text with each placeholder's string in one of `_FORMS`."""
    if not real.startswith(parts[0]):
        return None
    spans: list[Span] = [(parts[0], False)]
    at = len(parts[0])
    for k in range(1, len(parts), 2):
        value, text = values[int(parts[k])], parts[k + 1]
        forms = _candidates(value)
        form = next((f for f in forms if real.startswith(f, at) and real.startswith(text, at + len(f))), None)
        if form is None:
            return None
        spans += [(form, True), (text, False)]
        at += len(form) + len(text)
    return spans if at == len(real) else None


def _candidates(value: str) -> Iterator[str]:
    seen: set[str] = set()
    for form in _FORMS:
        out = form(value)
        if out not in seen:
            seen.add(out)
            yield out


def _merged(spans: Sequence[Span]) -> list[Span]:
    """Adjacent spans of one kind joined, empty ones dropped (each kind is encoded as one text)."""
    out: list[Span] = []
    for text, data in spans:
        if not text:
            continue
        if out and out[-1][1] == data:
            out[-1] = (out[-1][0] + text, data)
        else:
            out.append((text, data))
    return out


def _after(spans: Sequence[Span], offset: int) -> list[Span] | None:
    """The spans of the text from character `offset` on; None when `offset` falls inside message data."""
    at = 0
    for i, (text, data) in enumerate(spans):
        if at + len(text) > offset:
            if at == offset:
                return list(spans[i:])
            if data:
                return None
            return [(text[offset - at :], False), *spans[i + 1 :]]
        at += len(text)
    return []
