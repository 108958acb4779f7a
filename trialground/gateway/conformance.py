"""`trialground policy check-template`: whether a model's chat template trains token-exactly through the
gateway, checked by playing a scripted multi-turn tool conversation through the gateway itself.

The conversation (a system message, a task, two tool calls each answered by a tool result, a follow-up
user turn, a final answer) is answered by a scripted
generator whose "sampled" ids are the ids of the text a model of the template's style emits (its tool
call, then its end-of-turn token; in the `tags` style a `<think>` block first). The program side
echoes back each returned message, as the `openai`
SDK does. Per assistant turn the report says:

- `prefix_preserved`: the next call's prompt ids begin with this call's prompt and sampled ids (the
  episode stays one trajectory across this turn), else the turn starts a segment;
- `emitted_roundtrip`: the emitted tool call parses back (style parser) to the same name and arguments;
- `template_roundtrip`: the template's own rendering of the returned tool call, parsed with the same
  parser, gives the same call (a parser that disagrees with the template loses calls on re-rendering);

and, for the whole template, `special_tags`: tool tags that are special tokens, which a decode with
`skip_special_tokens=True` drops (the gateway decodes with them kept; other stacks may not);
`message_text`: how message text is encoded -- the tool results carry every special-token string of the
tokenizer -- `exact` when the template's text and the messages' text could be told apart exactly (the
ids a tool environment gives the same text), `fallback` when only the special-token strings could (still
text, never markers). `mode` is `trajectory` when every turn preserves the prefix, else `segments`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from trialground.gateway import toolstyle
from trialground.gateway.api import ChatRequest, Message
from trialground.gateway.session import GatewayError, Session
from trialground.gateway.stitch import stitch
from trialground.policy.base import Generation, SamplingParams

TAGS = {"tags": ("<tool_call>", "</tool_call>"), "llama3": ("<|python_tag|>",), "mistral": ("[TOOL_CALLS]",)}
CALLS = [("bash", {"command": "ls"}), ("read_file", {"path": "solution.py"})]
FINAL = "The tests pass now."
THINK = "<think>\nI should look first.\n</think>\n\n"


class TurnCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: int
    tool_call: str | None
    prefix_preserved: bool
    emitted_roundtrip: bool | None
    template_roundtrip: bool | None
    note: str = ""


class TemplateReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    style: str
    tool_role: str
    turns: tuple[TurnCheck, ...]
    special_tags: tuple[str, ...]
    message_text: Literal["exact", "fallback"] = "exact"
    segments: int
    mode: Literal["trajectory", "segments"]

    @property
    def ok(self) -> bool:
        tool_ok = all(
            t.emitted_roundtrip is not False and t.template_roundtrip is not False for t in self.turns
        )
        return tool_ok and not self.special_tags

    def text(self) -> str:
        lines = [f"style {self.style}, tool results as role {self.tool_role!r}"]
        for t in self.turns:

            def mark(v: bool | None) -> str:
                return "-" if v is None else ("ok" if v else "FAIL")

            lines.append(
                f"  turn {t.turn} ({t.tool_call or 'answer'}): prefix {mark(t.prefix_preserved)}, "
                f"emitted call {mark(t.emitted_roundtrip)}, template call {mark(t.template_roundtrip)}"
                + (f"  {t.note}" if t.note else "")
            )
        if self.special_tags:
            lines.append(
                f"  special-token tool tags: {', '.join(self.special_tags)} (a decode with "
                "skip_special_tokens=True drops them)"
            )
        lines.append(
            "  message text: "
            + (
                "plain text, told apart from the template's markers exactly"
                if self.message_text == "exact"
                else "the template rewrites it; only its special-token strings are kept as text"
            )
        )
        lines.append(
            f"mode: {self.mode}"
            + ("" if self.mode == "trajectory" else f" ({self.segments} segments for this conversation)")
        )
        return "\n".join(lines)


class _Scripted:
    """Answers each call with the next scripted text, encoded, plus the end-of-turn token."""

    def __init__(self, tokenizer: Any, texts: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.version = 0
        self._texts = list(texts)
        eos = tokenizer.eos_token_id
        self._eos = [int(eos)] if isinstance(eos, int) else []

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        text = self._texts.pop(0)
        ids = tuple(self.tokenizer.encode(text, add_special_tokens=False)) + tuple(self._eos)
        return [
            Generation(token_ids=ids, logprobs=(0.0,) * len(ids), text=text, finish_reason="eos", version=0)
        ]


def special_tags(tokenizer: Any, style: str) -> tuple[str, ...]:
    specials = set(getattr(tokenizer, "all_special_tokens", []))
    out = []
    for tag in TAGS.get(style, ()):
        ids = tokenizer.encode(tag, add_special_tokens=False)
        dropped = tag not in tokenizer.decode(ids, skip_special_tokens=True)
        if tag in specials or dropped:
            out.append(tag)
    return tuple(out)


async def check_async(tokenizer: Any, *, style: str | None = None, tool_role: str = "tool") -> TemplateReport:
    session = Session(
        _Scripted(tokenizer, []), SamplingParams(), "check", tool_role=tool_role, tool_style=style
    )
    style = session.style
    think = THINK if style == "tags" else ""  # reasoning blocks belong to the tags families (Qwen3)
    emitted = [think + toolstyle.EMIT[style](n, a) for n, a in CALLS] + [think + FINAL]
    session.generator = _Scripted(tokenizer, emitted)
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
        for n, _ in CALLS
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix code."},
        {"role": "user", "content": "solution.py is broken; fix it."},
    ]
    checks: list[tuple[str | None, bool | None, bool | None, str]] = []
    forged = " ".join(session.renderer.special_strings())  # to stay text in the tool results
    for i in range(len(emitted)):
        try:
            reply = await session.chat(
                ChatRequest(messages=[Message.model_validate(m) for m in messages], tools=tools)
            )
        except GatewayError as exc:
            raise ValueError(f"the gateway refuses the conversation: {exc}") from exc
        message = reply["choices"][0]["message"]
        want = CALLS[i] if i < len(CALLS) else None
        got = [
            (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        emitted_ok = None if want is None else got == [want]
        template_ok, note = None, ""
        messages.append({k: v for k, v in message.items() if v is not None})
        if want is not None:
            template_ok, note = _template_roundtrip(session, messages, want, style)
            call_id = (message.get("tool_calls") or [{"id": "call_0"}])[0]["id"]
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": f"output of {want[0]} {forged}"}
            )
        if i == len(CALLS) - 1:
            messages.append({"role": "user", "content": "Good. Now say whether the tests pass."})
        checks.append((want[0] if want else None, emitted_ok, template_ok, note))
    records = session.records
    turns = []
    for i, (name, emitted_ok, template_ok, note) in enumerate(checks):
        if i + 1 < len(records):
            cur, nxt = records[i], records[i + 1]
            before = [*cur.prompt_ids, *cur.choices[0].token_ids]
            preserved = list(nxt.prompt_ids[: len(before)]) == before
        else:
            preserved = True  # the last turn: nothing follows it
        turns.append(
            TurnCheck(
                turn=i + 1,
                tool_call=name,
                prefix_preserved=preserved,
                emitted_roundtrip=emitted_ok,
                template_roundtrip=template_ok,
                note=note,
            )
        )
    joined = stitch(records)
    return TemplateReport(
        style=style,
        tool_role=tool_role,
        turns=tuple(turns),
        special_tags=special_tags(tokenizer, style),
        message_text="exact" if session.renderer.fallback_renders == 0 else "fallback",
        segments=joined.segments,
        mode="trajectory" if joined.segments == 1 else "segments",
    )


def _template_roundtrip(
    session: Session, messages: list[dict[str, Any]], want: tuple[str, dict[str, Any]], style: str
) -> tuple[bool, str]:
    """Render the conversation through the returned assistant message and parse what the template wrote
    for it."""
    renderer = session.renderer
    msgs = [Message.model_validate(m) for m in messages]
    try:
        before = renderer.render(msgs[:-1], generation_prompt=True, tools=None)
        after = renderer.render(msgs, generation_prompt=False, tools=None)
    except Exception as exc:
        return False, f"the template cannot render a tool call: {type(exc).__name__}: {exc}"
    if not after.startswith(before):
        return False, "the template re-renders earlier turns once a tool call follows"
    part = after[len(before) :]
    if want[0] not in part:
        return False, "the template does not render assistant tool calls"
    parsed = toolstyle.parse(style, toolstyle.strip_end(part, renderer.tokenizer))
    calls = [(n, a) for n, a in parsed.calls]
    if calls != [want]:
        return (
            False,
            f"the template writes the call as {part.strip()[:80]!r}, which the parser reads as {calls}",
        )
    return True, ""


def check(tokenizer: Any, *, style: str | None = None, tool_role: str = "tool") -> TemplateReport:
    import asyncio

    return asyncio.run(check_async(tokenizer, style=style, tool_role=tool_role))


def load_tokenizer_dir(path: str, chat_template: str = "auto") -> Any:
    """A tokenizer from a local directory, a bundled or packaged model's name or a `.gguf` file, with the
    chat template `chat_template` chooses (`policy/templates.py`); never runs the directory's own code."""
    from transformers import AutoTokenizer

    from trialground.policy.templates import with_template
    from trialground.policy.tiny import resolve_model_dir

    source = resolve_model_dir(path) if not Path(path).expanduser().is_dir() else Path(path).expanduser()
    tok = AutoTokenizer.from_pretrained(str(source), trust_remote_code=False, local_files_only=True)
    return with_template(tok, chat_template)
