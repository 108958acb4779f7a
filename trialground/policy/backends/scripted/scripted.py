"""A deterministic scripted policy for tests: canned responses, tokenised with a real tokenizer.

Responses come from a list (consumed in order, cycling) or from a callable `(prompt_text, index) -> str`,
where `index` counts generations made so far. Each response is encoded with the tokenizer (the bundled
tiny one by default) and the eos token is appended (finish_reason "eos"), unless `max_new_tokens` cuts
it ("length") or a stop string ends it ("stop"). Every token gets the logprob `logprob`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trialground.errors import PolicyError
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.decoding import completion_text

Responder = Callable[[str, int], str]


def load_tokenizer(name: str = "tiny") -> Any:
    """A Hugging Face tokenizer: 'tiny' (the bundled one) or a local directory."""
    from transformers import AutoTokenizer

    from trialground.policy.tiny import BUNDLED, resolve_model_dir

    return AutoTokenizer.from_pretrained(
        resolve_model_dir(name) if name in BUNDLED else name, trust_remote_code=False
    )


class ScriptedPolicy(Policy):
    def __init__(
        self, responses: Sequence[str] | Responder, *, tokenizer: Any = None, logprob: float = -1.0
    ) -> None:
        if not callable(responses) and not responses:
            raise PolicyError("scripted policy needs at least one response")
        self._responses = responses
        self._tokenizer = tokenizer if tokenizer is not None else load_tokenizer()
        self._logprob = logprob
        self._counter = itertools.count()
        self.version = 0
        self.calls: list[list[int]] = []  # every prompt seen, for assertions in tests

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def _respond(self, prompt_text: str) -> str:
        index = next(self._counter)
        if callable(self._responses):
            return self._responses(prompt_text, index)
        return self._responses[index % len(self._responses)]

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return [self._one(list(p), params) for p in prompts]

    def _one(self, prompt: list[int], params: SamplingParams) -> Generation:
        self.calls.append(prompt)
        text = self._respond(self._tokenizer.decode(prompt))
        reason = "eos"
        for stop in params.stop:
            cut = text.find(stop)
            if cut >= 0:
                text, reason = text[: cut + len(stop)], "stop"
        ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        if reason == "eos":
            ids.append(self._tokenizer.eos_token_id)
        if len(ids) > params.max_new_tokens:
            ids, reason = ids[: params.max_new_tokens], "length"
        return Generation(
            token_ids=tuple(ids),
            logprobs=(self._logprob,) * len(ids),
            text=completion_text(self._tokenizer, ids),
            finish_reason=reason,  # type: ignore[arg-type]
            version=self.version,
        )

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        self.version = version
