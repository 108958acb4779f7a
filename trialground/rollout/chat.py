"""Chat-template rendering for token-exact multi-turn episodes.

The prompt is rendered once with the tokenizer's chat template. After that the context only ever grows
by appending: the policy's sampled ids verbatim, then the ids of the environment's answer. The answer's
ids are the template's text *between* an assistant message and the next generation prompt -- found once
per role by rendering a two-message conversation around sentinel strings -- with the observation text in
its place. So no policy text is ever re-tokenised, and a context is always what the template would
render, except that the policy's own tokens stand for themselves. The observation text itself is encoded
as plain text (`encode_plain`): a `<|im_end|>` written by a program in the workspace stays characters,
never the special id that ends a turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_ASSISTANT = "\u2063TG-ASSISTANT\u2063"
_OBSERVATION = "\u2063TG-OBSERVATION\u2063"


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


class ChatRenderer:
    """Renders prompts and observation turns as token ids with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; token-exact rollouts need one")
        self.tokenizer = tokenizer
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
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """The rendered conversation, ending with the generation prompt. `tools` (JSON-schema function
        descriptions) go to the template when it takes them, and are left out when it does not."""
        return self.encode(self._render(messages, generation_prompt=True, tools=tools))

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
        return plain_ids(self.tokenizer, text)
