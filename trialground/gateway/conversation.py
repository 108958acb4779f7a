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
(`Renderer.split`, which leaves the telling apart to `rollout.chat.TemplateSpans`, the code
`ToolEnv`'s first prompt is rendered with).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trialground import plainjson
from trialground.gateway.api import Message
from trialground.rollout.chat import Span, TemplateSpans, substitute

_SENTINEL = "\u2063TG-GATEWAY\u2063"
Canon = tuple[Any, ...]

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
        return plainjson.loads(raw, plainjson.TOOL_CALL) if raw.strip() else {}
    except plainjson.UnparsableJSON:
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
        self.spans = TemplateSpans(tokenizer)
        self._close: list[int] | None = None
        self.fallback_renders = 0  # renders split at special-token strings only (see `split`)

    def template_messages(
        self, messages: Sequence[Message], sub: Callable[[str], str] = str
    ) -> list[dict[str, Any]]:
        """The messages as the template reads them, `sub` applied to every string they carry (text,
        tool-call ids, names and arguments, keys included; never a role)."""
        out = []
        for m in messages:
            d: dict[str, Any] = {"role": self.tool_role if m.role == "tool" else m.role, "content": m.text()}
            if m.tool_calls:
                d["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)},
                    }
                    for c in m.tool_calls
                ]
            if m.tool_call_id:
                d["tool_call_id"] = m.tool_call_id
            if m.name:
                d["name"] = m.name
            out.append(d)
        return substitute(out, sub)

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
        return self.spans.encode(text)

    def encode_plain(self, text: str) -> list[int]:
        """Ids of message data: special-token strings in it are split into ordinary tokens."""
        return self.spans.encode_plain(text)

    def encode_spans(self, spans: Sequence[Span]) -> list[int]:
        return self.spans.encode_spans(spans)

    def split(
        self,
        messages: Sequence[Message],
        *,
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> tuple[str, list[Span]]:
        """The render, and the spans (template text, message data) that join to exactly it
        (`TemplateSpans.split`: every string a message carries is told apart from the template's text
        with a placeholder render, else only its special-token strings are). Renders of the fallback are
        counted (`fallback_renders`); a template that makes markers of a message's text is refused
        (ValueError, a 400 to the program)."""
        real, spans, exact = self.spans.split(
            lambda ms: self._apply(ms, generation_prompt, tools), self.template_messages(messages)
        )
        if not exact:
            self.fallback_renders += 1
            log.debug("message strings split at special-token text only (%d renders)", self.fallback_renders)
        return real, spans

    def special_strings(self) -> list[str]:
        """The special-token strings a template encode turns into their ids, longest first."""
        return self.spans.special_strings()

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
        """Prompt ids for `messages`: continued from the latest turn of `history` they extend, else whole.
        A whole conversation has the ids `ChatRenderer.prompt_ids` gives (`TemplateSpans.encode_render`):
        without special-token strings in its messages, the render encoded at once, as the template's
        tokenizer encodes it; with them, each span by itself, message data as plain text."""
        canon = tuple(canonical(m) for m in messages)
        for turn in reversed(history):
            ids = self._continue(turn, canon, messages, tools)
            if ids is not None:
                return ids
        real, spans = self.split(messages, generation_prompt=True, tools=tools)
        return self.spans.encode_render(real, spans)

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
