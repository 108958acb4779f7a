"""The policy interface: token prompts in, sampled tokens with logprobs out, a version, new weights."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trialground.errors import PolicyError

if TYPE_CHECKING:
    from trialground.policy.adapters import Adapter

# The fields that shape the sampling distribution: every generation request states each of them.
DISTRIBUTION_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)


class SamplingParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(1.0, ge=0.0, le=5.0, description="0 means greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass")
    top_k: int = Field(
        0, ge=0, le=1_000_000, description="Sample among the k most likely tokens only (0: off, every token)"
    )
    min_p: float = Field(
        0.0, ge=0.0, le=1.0, description="Drop tokens less likely than min_p x the most likely one (0: off)"
    )
    repetition_penalty: float = Field(
        1.0, gt=0.0, le=10.0, description="Penalty on tokens already in prompt or output (1: off)"
    )
    presence_penalty: float = Field(
        0.0, ge=-2.0, le=2.0, description="Subtracted from the logit of each token already generated (0: off)"
    )
    frequency_penalty: float = Field(
        0.0, ge=-2.0, le=2.0, description="Subtracted per earlier occurrence in the output (0: off)"
    )
    max_new_tokens: int = Field(64, ge=1, le=131072, description="Tokens generated at most")
    stop: tuple[str, ...] = Field((), description="Strings that end generation (kept in the output)")
    seed: int | None = Field(None, description="Sampling seed, for reproducible generations")

    def changed(self) -> dict[str, float]:
        """The distribution fields that differ from the neutral defaults."""
        neutral = SamplingParams()
        return {k: getattr(self, k) for k in DISTRIBUTION_FIELDS if getattr(self, k) != getattr(neutral, k)}

    def penalties(self) -> dict[str, float]:
        """The penalties set away from their neutral values (empty when none is)."""
        neutral = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
        return {k: getattr(self, k) for k, v in neutral.items() if getattr(self, k) != v}


class Generation(BaseModel):
    """One sampled continuation. `logprobs[i]` is the sampling logprob of `token_ids[i]`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: Literal["stop", "length", "eos", "error"]
    version: int = Field(description="Policy version that produced it")


class Policy(abc.ABC):
    """A generator of tokens. Implementations: hf (transformers), vllm, remote (inference servers), openai
    (eval only), scripted."""

    version: int = 0
    # False: `trialground train` refuses the policy before its first step (evaluation only).
    trainable: bool = True
    # True: a training run pushes the trainer's starting weights before its first generation (the
    # policy samples with weights held elsewhere, e.g. servers that may still hold another run's).
    push_at_start: bool = False
    # True: under LoRA a training run sends only the adapter (`load_adapter`), not merged weights.
    takes_adapters: bool = False

    @property
    @abc.abstractmethod
    def tokenizer(self) -> Any:
        """A Hugging Face tokenizer (encode / decode / apply_chat_template)."""

    @abc.abstractmethod
    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One generation per prompt. Raises PolicyError when generation itself fails."""

    @abc.abstractmethod
    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Replace the weights; later generations are stamped with `version`."""

    # What the training loop uses beyond generation. The defaults fit a policy that samples elsewhere and
    # keeps no sampling RNG of its own; in-process policies override them.

    def shared_module(self) -> Any | None:
        """The torch module this policy samples with, when the trainer may update it in place (same
        process, same device); None: the trainer keeps its own copy and pushes weights with
        `load_weights`."""
        return None

    def idle(self) -> None:  # noqa: B027 - a no-op is the right default
        """No generation until the next `load_weights` (a sync run's update): a colocated engine may free
        its accelerator memory for the trainer (vLLM's sleep mode) and take it back in `load_weights`."""

    def seed_sampling(self, seed: int) -> None:  # noqa: B027 - a no-op is the right default
        """Make unseeded generations depend on the run's `seed` (no-op for a policy without its own RNG)."""

    def sampling_rng_state(self) -> Any | None:
        """What `set_sampling_rng_state` needs to continue the sampling stream after a resume; None: no
        state (a resumed run samples afresh)."""
        return None

    def set_sampling_rng_state(self, state: Any) -> None:  # noqa: B027 - a no-op is the right default
        """Restore what `sampling_rng_state` returned."""

    def close(self) -> None:  # noqa: B027 - a no-op is the right default
        """Release processes, servers or devices the policy holds; idempotent."""

    def load_adapter(self, adapter: Adapter, version: int) -> None:
        """Sample with the starting weights plus `adapter` (replacing the last one); later generations are
        stamped with `version`. Only where `takes_adapters`."""
        raise PolicyError(f"{type(self).__name__} takes full weights, not adapters", kind="weights")

    async def alternatives(
        self, prompt: Sequence[int], generation: Generation, params: SamplingParams, k: int
    ) -> list[list[tuple[int, float]]] | None:
        """The k most likely (token id, logprob) at each of `generation`'s positions, most likely first,
        under the weights and sampling that drew it (OpenAI's `top_logprobs`); None: this policy cannot
        give them. Raises PolicyError when the weights changed since `generation` was drawn."""
        return None
