"""Helpers for trainer tests: a tiny random Llama and hand-made trajectories."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trialground.errors import ErrorInfo
from trialground.rollout.trajectory import Trajectory, Turn
from trialground.verify.reward.model import Reward

VOCAB = 40
PAD = 0


def tiny_llama(seed: int = 0, vocab: int = VOCAB) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(cfg).eval()


def traj(
    prompt: Sequence[int],
    parts: Sequence[tuple[str, Sequence[int], Sequence[float]]],
    *,
    reward: float | None = 1.0,
    group: str = "g0",
    index: int = 0,
    error: bool = False,
) -> Trajectory:
    """A trajectory from `(role, ids, logprobs)` parts after the prompt."""
    turns = [Turn(role="prompt", token_ids=tuple(prompt))]
    turns += [Turn(role=r, token_ids=tuple(ids), logprobs=tuple(lp)) for r, ids, lp in parts]  # type: ignore[arg-type]
    return Trajectory(
        task_id="t",
        group_id=group,
        sample_index=index,
        policy_version=0,
        turns=tuple(turns),
        reward=None if reward is None else Reward(outcome=reward, gated=False),
        error=ErrorInfo(boundary="sandbox", kind="crash", message="boom") if error else None,
    )


@torch.no_grad()
def sequence_logprobs(
    model: LlamaForCausalLM, ids: Sequence[int], start: int, temperature: float = 1.0
) -> list[float]:
    """Logprobs of ids[start:] given the preceding ids, by one forward pass."""
    x = torch.tensor([list(ids)])
    logits = model(input_ids=x).logits[0, start - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, x[0, start:].unsqueeze(-1)).squeeze(-1).tolist()
