"""Supervised fine-tuning: a warm start from demonstrations before reinforcement learning.

Examples are token ids with a loss mask, built as rollouts build them:

- from trajectory files (`trajectories/*.parquet` of a run, or `trialground eval --episodes`): each row's
  turns as training used them (`turn_token_ids`; the policy's turns trained, the prompt and what the
  environment said masked); `min_reward` keeps only rows whose reward reached it;
- from JSONL, one example a line: `{"messages": [...]}` (a chat: system and user messages, then assistant
  turns and the user or tool messages that answer them) or `{"prompt": ..., "completion": ...}`. They are
  rendered with the policy's chat template exactly as the agent loop renders an episode
  (`rollout.chat.ChatRenderer`): the prompt as the template renders it, each assistant turn as its text's
  ids and the eos token (trained), each answer as the template's observation turn (masked).

The loss is the mean negative log-likelihood of the trained tokens. Nothing full-size is materialised:
the output layer runs on the trained positions only, in chunks recomputed in the backward pass, so a
262k-token vocabulary costs a chunk of logits at a time.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.utils.checkpoint import checkpoint

from trialground.rollout.chat import ChatRenderer

_HEAD_CHUNK = 256  # trained positions whose logits exist at once


class SFTConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lr: float = Field(1e-5, gt=0, le=1.0, description="AdamW learning rate")
    epochs: int = Field(1, ge=1, le=1000, description="Passes over the examples")
    batch_size: int = Field(4, ge=1, le=4096, description="Examples per optimiser step")
    max_tokens: int = Field(2048, ge=8, description="Examples longer than this many tokens are skipped")
    min_reward: float | None = Field(None, description="Trajectory rows: keep those with reward >= this")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW weight decay")
    grad_clip: float = Field(1.0, gt=0.0, description="Gradient norm clip")
    seed: int = Field(0, description="Shuffling seed")
    observation_role: str = Field("user", description="JSONL: the role `tool` messages are rendered in")


@dataclass(frozen=True)
class Example:
    """One trainable sequence: `ids`, and `mask` (1: trained) of the same length."""

    ids: list[int]
    mask: list[int]


def from_trajectories(paths: Sequence[Path], min_reward: float | None = None) -> list[Example]:
    """Examples from trajectory Parquet files (one per segment of each kept row)."""
    import pyarrow.parquet as pq

    out: list[Example] = []
    for path in paths:
        table = pq.read_table(path)
        if "turn_token_ids" not in table.column_names:
            raise ValueError(f"{path}: no turn_token_ids column (written before trajectories kept their ids)")
        for row in table.to_pylist():
            if row.get("error_kind") is not None or row.get("excluded") == "error":
                continue
            if min_reward is not None and (row.get("reward") is None or row["reward"] < min_reward):
                continue
            ids: list[int] = []
            mask: list[int] = []
            for role, turn in zip(row["turn_roles"], row["turn_token_ids"], strict=True):
                if role == "prompt" and any(mask):  # a rewritten history: a new segment
                    out.append(Example(ids, mask))
                    ids, mask = [], []
                ids += turn
                mask += [1 if role == "policy" else 0] * len(turn)
            if any(mask):
                out.append(Example(ids, mask))
    return out


def from_jsonl(path: Path, tokenizer: Any, observation_role: str = "user") -> list[Example]:
    """Examples from a JSONL file of chats or prompt/completion pairs, rendered as episodes are."""
    renderer = ChatRenderer(tokenizer)
    eos = tokenizer.eos_token_id
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            messages = row["messages"] if "messages" in row else _pair(row)
            out.append(_render(renderer, tokenizer, messages, eos, observation_role))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{number}: {type(exc).__name__}: {exc}") from exc
    return out


def _pair(row: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": str(row["prompt"])},
        {"role": "assistant", "content": str(row["completion"])},
    ]


def _render(
    renderer: ChatRenderer, tokenizer: Any, messages: list[dict[str, Any]], eos: int, role: str
) -> Example:
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or first == 0:
        raise ValueError("a chat needs a prompt message, then at least one assistant message")
    ids = renderer.prompt_ids(messages[:first])
    mask = [0] * len(ids)
    last: list[int] = []
    for m in messages[first:]:
        if m["role"] == "assistant":
            last = [*tokenizer.encode(str(m["content"]), add_special_tokens=False), eos]
            ids, mask = ids + last, mask + [1] * len(last)
        else:
            obs_role = role if m["role"] == "tool" else str(m["role"])
            obs = renderer.observation_ids(str(m["content"]), role=obs_role, after=last)
            ids, mask = ids + obs, mask + [0] * len(obs)
    return Example(ids, mask)


def _head_nll(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed negative log-likelihood of `targets` [N] under the output layer `weight` [V, d] applied to
    `hidden` [N, d]; the logits [N, V] live only inside this call."""
    logits = (hidden @ weight.t()).float()  # [N, V]
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum")


def example_loss(model: nn.Module, examples: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed NLL of the trained tokens of `examples` (one right-padded forward) and how many there are."""
    device = next(model.parameters()).device
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long, device=device)
    attn = torch.zeros_like(ids)
    trained = torch.zeros_like(ids, dtype=torch.bool)
    for r, e in enumerate(examples):
        ids[r, : len(e.ids)] = torch.tensor(e.ids, device=device)
        attn[r, : len(e.ids)] = 1
        trained[r, : len(e.mask)] = torch.tensor(e.mask, device=device, dtype=torch.bool)
    decoder: Any = model.get_decoder()  # type: ignore[operator]
    hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state  # [B, L, d]
    at = trained[:, 1:]  # position t predicts token t + 1
    states = hidden[:, :-1][at]  # [N, d]
    targets = ids[:, 1:][at]  # [N]
    weight = model.get_output_embeddings().weight  # type: ignore[operator]
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, len(targets), _HEAD_CHUNK):
        part = slice(start, start + _HEAD_CHUNK)
        total = total + checkpoint(_head_nll, states[part], weight, targets[part], use_reentrant=False)
    return total, len(targets)


def _batches(examples: list[Example], size: int, rng: random.Random) -> Iterator[list[Example]]:
    order = list(examples)
    rng.shuffle(order)
    for i in range(0, len(order), size):
        yield order[i : i + size]


def train_sft(
    model: nn.Module, examples: Sequence[Example], config: SFTConfig, pad_id: int
) -> list[dict[str, float]]:
    """Fine-tune `model` in place on `examples`; one record per optimiser step (epoch, step, loss as the
    mean NLL per trained token, tokens)."""
    if getattr(model.config, "final_logit_softcapping", None):
        raise ValueError("SFT does not soft-cap logits: a model with final_logit_softcapping is refused")
    kept = [e for e in examples if len(e.ids) <= config.max_tokens and any(e.mask)]
    if not kept:
        raise ValueError(f"no example with a trained token fits max_tokens={config.max_tokens}")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    rng = random.Random(config.seed)
    model.train()
    log: list[dict[str, float]] = []
    step = 0
    for epoch in range(config.epochs):
        for batch in _batches(kept, config.batch_size, rng):
            loss, tokens = example_loss(model, batch, pad_id)
            opt.zero_grad(set_to_none=True)
            (loss / tokens).backward()
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            opt.step()
            step += 1
            mean = float(loss.detach()) / tokens
            if not math.isfinite(mean):
                raise ValueError(f"SFT loss is {mean} at step {step}")
            log.append({"epoch": float(epoch), "step": float(step), "loss": mean, "tokens": float(tokens)})
    model.eval()
    return log
