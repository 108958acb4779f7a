"""Chat-template rendering for token-exact multi-turn episodes.

The prompt is rendered once with the tokenizer's chat template. After that the context only ever grows
by appending: the policy's sampled ids verbatim, then the ids of the environment's answer. The answer's
ids are the template's text *between* an assistant message and the next generation prompt -- found once
per role by rendering a two-message conversation around sentinel strings -- with the observation text in
its place. So no policy text is ever re-tokenised, and a context is always what the template would
render, except that the policy's own tokens stand for themselves. The observation text itself is encoded
as plain text (`encode_plain`): a `<|im_end|>` written by a program in the workspace stays characters,
never the special id that ends a turn.

What the prompt's messages say is data too (`TemplateSpans`, shared with the gateway's renderer): the
render is split into the template's own text and the strings the messages carry, and a special-token
string in a task prompt or a system prompt stays characters. A prompt whose messages hold none is
encoded as the template renders it, at once.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_ASSISTANT = "\u2063TG-ASSISTANT\u2063"
_OBSERVATION = "\u2063TG-OBSERVATION\u2063"
# A piece of a render: its text, and whether it is message data (plain text) rather than template text.
Span = tuple[str, bool]
# A render of messages given as template input (generation prompt and tools bound by the caller).
Render = Callable[[list[dict[str, Any]]], str]
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


@dataclass(frozen=True)
class _Frame:
    close: list[int]  # ids that end an assistant turn (e.g. "<|end|>\n")
    before: str  # text that opens the observation turn
    after: str  # text after the observation, through the next generation prompt


def plain_ids(tokenizer: Any, text: str) -> list[int]:
    """Ids of text that is data (tool output, an observation, a message's content): special-token markers
    in it are split into ordinary tokens, so the workspace cannot forge a turn boundary or a role in the
    context. The one rule for `ToolEnv`'s renderer and the gateway's."""
    return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))


def substitute(messages: Sequence[Mapping[str, Any]], sub: Callable[[str], str]) -> list[dict[str, Any]]:
    """The messages as the template reads them, `sub` applied to every string they carry as data: text
    content (or each text part's text), `name`, `tool_call_id`, and of each tool call its id, function name
    and arguments (every string in parsed arguments, keys included). A role, a tool call's type and any
    other field are template input, passed as they are."""
    out = []
    for m in messages:
        d = dict(m)
        content = d.get("content")
        if isinstance(content, str):
            d["content"] = sub(content)
        elif isinstance(content, list):
            d["content"] = [_part(p, sub) for p in content]
        for key in ("name", "tool_call_id"):
            if isinstance(d.get(key), str):
                d[key] = sub(d[key])
        if d.get("tool_calls"):
            d["tool_calls"] = [_call(c, sub) if isinstance(c, Mapping) else c for c in d["tool_calls"]]
        out.append(d)
    return out


def _part(part: Any, sub: Callable[[str], str]) -> Any:
    """A content part with `sub` applied to its text."""
    if isinstance(part, Mapping) and isinstance(part.get("text"), str):
        return {**part, "text": sub(part["text"])}
    return part


def _call(call: Mapping[str, Any], sub: Callable[[str], str]) -> dict[str, Any]:
    out = dict(call)
    if isinstance(out.get("id"), str):
        out["id"] = sub(out["id"])
    function = out.get("function")
    if isinstance(function, Mapping):
        function = dict(function)
        if isinstance(function.get("name"), str):
            function["name"] = sub(function["name"])
        if "arguments" in function:
            function["arguments"] = _strings(function["arguments"], sub)
        out["function"] = function
    return out


def _strings(value: Any, sub: Callable[[str], str]) -> Any:
    """`value` (tool-call arguments) with `sub` applied to every string in it, keys included."""
    if isinstance(value, str):
        return sub(value)
    if isinstance(value, dict):
        return {sub(k) if isinstance(k, str) else k: _strings(v, sub) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, sub) for v in value]
    return value


class TemplateSpans:
    """Tells a chat template's own text from the strings its messages carry, and encodes each as what it
    is: template text with its special-token markers as their ids, message data as plain text
    (`plain_ids`). Used by `ChatRenderer.prompt_ids` and the gateway's renderer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._specials: tuple[list[str], re.Pattern[str] | None] | None = None

    def encode(self, text: str) -> list[int]:
        """Ids of template text: its special-token markers become their ids."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_plain(self, text: str) -> list[int]:
        """Ids of message data: special-token strings in it are split into ordinary tokens."""
        return plain_ids(self.tokenizer, text)

    def encode_spans(self, spans: Sequence[Span]) -> list[int]:
        """Ids of the spans, adjacent spans of one kind encoded as one text."""
        ids: list[int] = []
        for text, data in _merged(spans):
            ids += self.encode_plain(text) if data else self.encode(text)
        return ids

    def encode_render(self, real: str, spans: Sequence[Span]) -> list[int]:
        """Ids of a render split into `spans`: the render encoded at once when every special-token string
        in it is the template's own (the ids the template gives, token for token), else `encode_spans`."""
        found = self._special_re()[1]
        if found is None:
            return self.encode(real)
        own: list[tuple[int, int]] = []
        at = 0
        for text, data in spans:
            if not data:
                own += [(at + m.start(), at + m.end()) for m in found.finditer(text)]
            at += len(text)
        if [(m.start(), m.end()) for m in found.finditer(real)] == own:
            return self.encode(real)
        return self.encode_spans(spans)

    def split(self, render: Render, messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[Span], bool]:
        """The render of `messages`, the spans (template text, message data) that join to exactly it, and
        whether they are exact (False: the fallback below).

        The template is rendered a second time with every string the messages carry (`substitute`)
        replaced by a placeholder holding a fresh random nonce; its text between placeholders is the
        template's own (nothing a message says can reach it). The real render must then be that text with
        each placeholder replaced by its string in one of the forms templates write (`_FORMS`), else the
        template writes a string some other way or branches on what it says.

        Then, the fallback: only the special-token strings inside the messages' strings are replaced by
        placeholders, the render encoded as it is except that each of those is plain text. No message
        forges a marker either way; the ids at the edges of such a string may differ from a tool
        environment's for the same text. A template that mangles even those placeholders, or whose render
        holds more markers than it writes with a placeholder for every string (it made one of a message's
        text: `| lower` of `<|END|>`), is refused (ValueError) rather than encoded with markers parsed:
        nothing tells the template's markers from the message's then, and a message must never forge a
        turn.
        """
        real = render([dict(m) for m in messages])
        nonce = secrets.token_hex(8)
        values: list[str] = []

        def placeholder(value: str) -> str:
            if not value:
                return value  # templates test emptiness (`if m.content`): an empty string stays one
            values.append(value)
            return f"TGPH{nonce}N{len(values) - 1}E"

        try:
            marked = render(substitute(messages, placeholder))
        except Exception:  # a template that checks what a message says (an id's length) refuses them
            marked = None
        if marked is not None:
            spans = _align(real, re.split(f"TGPH{nonce}N(\\d+)E", marked), values)
            if spans is not None:
                return real, spans, True
        limit = None if marked is None else self.markers(marked)
        fallback = self._split_specials(render, messages, real, limit)
        if fallback is None:
            raise ValueError(
                "the chat template rewrites message text into or out of special-token strings; it cannot "
                "be rendered without that text acting as the template's own markers"
            )
        return real, fallback, False

    def _split_specials(
        self, render: Render, messages: Sequence[Mapping[str, Any]], real: str, limit: int | None
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

        substitute(messages, collect)
        spans: list[Span] = [(real, False)]
        if found is not None and any(found.search(v) for v in strings):
            nonce = secrets.token_hex(8)
            index = {s: i for i, s in enumerate(specials)}

            def placeholder(value: str) -> str:
                return found.sub(lambda m: f"TGSP{nonce}N{index[m[0]]}E", value)

            try:
                marked = render(substitute(messages, placeholder))
            except Exception:
                return None
            parts = re.split(f"TGSP{nonce}N(\\d+)E", marked)
            spans = [(specials[int(p)], True) if i % 2 else (p, False) for i, p in enumerate(parts)]
            if "".join(t for t, _ in spans) != real:
                return None
        if limit is not None and sum(self.markers(t) for t, data in spans if not data) > limit:
            return None
        return spans

    def special_strings(self) -> list[str]:
        """The special-token strings a template encode turns into their ids, longest first."""
        return list(self._special_re()[0])

    def markers(self, text: str) -> int:
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


class ChatRenderer:
    """Renders prompts and observation turns as token ids with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; token-exact rollouts need one")
        self.tokenizer = tokenizer
        self.spans = TemplateSpans(tokenizer)
        self._frames: dict[str, _Frame] = {}

    @property
    def takes_tools(self) -> bool:
        """Whether the chat template renders a `tools` argument (Qwen, Llama 3, Mistral templates do)."""
        template = self.tokenizer.chat_template
        text = template if isinstance(template, str) else " ".join(map(str, dict(template).values()))
        return "tools" in text

    def _render(
        self,
        messages: Sequence[Mapping[str, Any]],
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        extra = {"tools": [dict(t) for t in tools]} if tools and self.takes_tools else {}
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=generation_prompt, **extra
        )
        if not isinstance(text, str):
            raise ValueError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not text")
        return text

    def encode(self, text: str) -> list[int]:
        """Ids of template text; special-token markers in it become their special ids."""
        return self.spans.encode(text)

    def prompt_ids(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """The rendered conversation, ending with the generation prompt. `tools` (JSON-schema function
        descriptions) go to the template when it takes them, and are left out when it does not.

        The strings the messages carry (content, names, tool-call ids and arguments) are data
        (`TemplateSpans.split`): a special-token string in them stays characters, and only the
        template's own markers become special ids. Messages without one give the ids of the whole render
        encoded at once. The tool schemas are template input, encoded with the template's text: a
        special-token string in a schema becomes its id. A template that turns message text into
        special-token strings is refused (ValueError)."""
        real, spans, _ = self.spans.split(
            lambda ms: self._render(ms, generation_prompt=True, tools=tools), messages
        )
        return self.spans.encode_render(real, spans)

    def _frame(self, role: str) -> _Frame:
        if role in self._frames:
            return self._frames[role]
        base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _ASSISTANT}]
        head = self._render(base, generation_prompt=False)
        full = self._render([*base, {"role": role, "content": _OBSERVATION}], generation_prompt=True)
        if not full.startswith(head) or _ASSISTANT not in head or _OBSERVATION not in full[len(head) :]:
            raise ValueError(
                f"chat template is not append-only for a {role!r} turn after an assistant turn; "
                "token-exact multi-turn rollouts cannot be rendered with it"
            )
        close = head[head.rindex(_ASSISTANT) + len(_ASSISTANT) :]
        before, _, after = full[len(head) :].partition(_OBSERVATION)
        frame = _Frame(close=self.encode(close) if close else [], before=before, after=after)
        self._frames[role] = frame
        return frame

    def observation_ids(self, text: str, *, role: str = "user", after: Sequence[int] = ()) -> list[int]:
        """Ids to append after the policy's tokens `after` so the context continues as the template would:
        the assistant turn's closing marker (unless the policy already emitted it, e.g. its eos), the
        observation as a `role` turn, and the next generation prompt."""
        frame = self._frame(role)
        close = frame.close
        # The policy's own stop token (eos) is the close marker's first token: don't write it twice.
        if close and after and after[-1] == close[0]:
            close = close[1:]
        return list(close) + self.encode(frame.before) + self.encode_plain(text) + self.encode(frame.after)

    def encode_plain(self, text: str) -> list[int]:
        """Ids of data text: special-token strings in it are split into ordinary tokens."""
        return self.spans.encode_plain(text)
