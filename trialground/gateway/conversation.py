"""Messages to prompt ids, token-exactly across the calls of one episode.

A call whose messages are an earlier call's messages plus one of the assistant messages the gateway
returned for it (compared by role, text and tool calls, never by ids the program may rewrite), plus new
messages, gets that call's prompt ids + the ids that were sampled + the ids of the new messages as the
chat template renders them after the assistant turn (its closing marker, unless the model emitted it, then
each new message and the generation prompt). Nothing the model sampled is re-tokenised. Any other
conversation -- the first call, a history the program truncated or edited, or one the template renders
differently once more turns follow (Qwen3 strips earlier reasoning) -- is rendered whole; stitching
(`stitch.py`) then starts a new segment there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trialground.gateway.api import Message

_SENTINEL = "\u2063TG-GATEWAY\u2063"
Canon = tuple[Any, ...]


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

    def template_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
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
        return out

    def render(
        self,
        messages: Sequence[Message],
        *,
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> str:
        extra = {"tools": [dict(t) for t in tools]} if tools and self.takes_tools else {}
        text = self.tokenizer.apply_chat_template(
            self.template_messages(messages), tokenize=False, add_generation_prompt=generation_prompt, **extra
        )
        if not isinstance(text, str):
            raise ValueError(f"apply_chat_template returned {type(text).__name__}, not text")
        return text

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

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
        return self.encode(self.render(messages, generation_prompt=True, tools=tools))

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
        full = self.render(messages, generation_prompt=True, tools=tools)
        if not full.startswith(head):
            return None  # the template renders the earlier turns differently now: a rewrite
        close = self.close_ids()
        if close and chosen.token_ids and chosen.token_ids[-1] == close[0]:
            close = close[1:]  # the model's own end-of-turn token is the marker's first token
        return [*turn.prompt_ids, *chosen.token_ids, *close, *self.encode(full[len(head) :])]
