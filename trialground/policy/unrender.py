"""A rendered chat prompt back into the messages it was rendered from.

The policy interface hands a backend prompt ids that the agent loop already rendered with the chat
template (`rollout.chat.ChatRenderer`, plus the sampled turns and observations appended in the template's
own frame). A chat endpoint applies its template itself, so sending that text as one user message renders
the template twice. `Unrenderer.messages` recovers the conversation instead: it learns from the template
how each role's message opens and closes (renders of sentinel strings), splits the prompt text at those
markers, and accepts the split only when the template renders the messages back to exactly the prompt.
A prompt it cannot split that way is a `PolicyError`, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trialground.errors import PolicyError

_S = "\u2063TG-MSG-{}\u2063"
MAX_RENDERS = 2000  # splits tried per prompt before giving up (markers written inside message text)
ROLES = ("system", "user", "assistant", "tool", "ipython")


@dataclass(frozen=True)
class _Frame:
    starts: dict[str, str]  # role -> the text a prompt starts with when its first message has that role
    opens: dict[tuple[str, str], str]  # (previous role, role) -> text between their contents
    generation: dict[str, str]  # last role -> the text after its content through the generation prompt


class Unrenderer:
    """Splits prompts rendered with `tokenizer`'s chat template into messages."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._frame: _Frame | None = None
        self._budget = MAX_RENDERS

    def _render(self, messages: list[dict[str, str]], generation: bool) -> str | None:
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        except Exception:  # a template's own `raise_exception` for an order it does not take
            return None
        return text if isinstance(text, str) else None

    def _pair(self, first: str, second: str | None) -> tuple[str, str, str] | None:
        """For a conversation `[first]` or `[first, second]` of sentinels: the text before the first
        sentinel, between the two, and after the last through the generation prompt."""
        messages = [{"role": first, "content": _S.format(0)}]
        if second is not None:
            messages.append({"role": second, "content": _S.format(1)})
        text = self._render(messages, True)
        if text is None or any(_S.format(i) not in text for i in range(len(messages))):
            return None
        head, rest = text.split(_S.format(0), 1)
        if second is None:
            return head, "", rest
        between, tail = rest.split(_S.format(1), 1)
        return head, between, tail

    @property
    def frame(self) -> _Frame:
        if self._frame is None:
            if not getattr(self.tokenizer, "chat_template", None):
                raise PolicyError(
                    "api chat: the tokenizer has no chat template to read prompts with", kind="config"
                )
            starts: dict[str, str] = {}
            opens: dict[tuple[str, str], str] = {}
            generation: dict[str, str] = {}
            for first in ROLES:
                alone = self._pair(first, None)
                if alone is not None:
                    starts.setdefault(first, alone[0])
                    generation.setdefault(first, alone[2])
                for second in ROLES:
                    pair = self._pair(first, second)
                    if pair is None:
                        continue
                    starts.setdefault(first, pair[0])
                    opens[(first, second)] = pair[1]
                    generation.setdefault(second, pair[2])
            self._frame = _Frame(starts, opens, generation)
        return self._frame

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """The messages whose render (with the generation prompt) is exactly `prompt`."""
        frame = self.frame
        self._budget = MAX_RENDERS
        # every start the prompt has, longest first (a default system text is part of a user start)
        for role, start in sorted(frame.starts.items(), key=lambda kv: -len(kv[1])):
            if not prompt.startswith(start):
                continue
            found = self._split(prompt, len(start), role, [])
            if found is not None:
                return found
        raise PolicyError(
            "api chat: the prompt is not a render of the chat template that can be split back into "
            "messages (send it with policy.api: completions)",
            kind="protocol",
        )

    def _split(
        self, prompt: str, at: int, role: str, done: list[dict[str, str]]
    ) -> list[dict[str, str]] | None:
        """Messages from character `at` on, the current one of `role`: the earliest marker that ends it
        and leads to a split the template renders back exactly (markers inside a message's text are
        skipped by trying the next one)."""
        frame = self.frame
        ends = [(text, nxt) for (prev, nxt), text in frame.opens.items() if prev == role and text]
        tail = frame.generation.get(role)
        candidates: list[tuple[int, str | None, str]] = []
        for marker, role_after in ends:
            start = prompt.find(marker, at)
            while start >= 0:
                candidates.append((start, role_after, marker))
                start = prompt.find(marker, start + 1)
        if tail and prompt.endswith(tail) and len(prompt) - len(tail) >= at:
            candidates.append((len(prompt) - len(tail), None, tail))
        for start, nxt, text in sorted(candidates, key=lambda c: c[0]):
            self._budget -= 1
            if self._budget < 0:
                return None
            here = [*done, {"role": role, "content": prompt[at:start]}]
            if nxt is None:
                if self._render(here, True) == prompt:
                    return here
                continue
            rendered = self._render(here, False)
            if rendered is not None and not prompt.startswith(rendered.rstrip()):
                continue  # not a boundary the template would write here
            found = self._split(prompt, start + len(text), nxt, here)
            if found is not None:
                return found
        return None
