"""Tensor helpers shared by sampling (`trialground.policy`) and training (`trialground.train`)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch


def left_pad(
    seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [N, W] left-padded so every sequence ends in the last column, and the mask [N, W]."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, x in enumerate(seqs):
        if x:
            ids[i, width - len(x) :] = torch.tensor(list(x), dtype=torch.long)
            mask[i, width - len(x) :] = 1
    return ids.to(device), mask.to(device)


def distinct_rows(seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Prefix sharing's bookkeeping: the first row holding each distinct sequence, and for every row the
    index of its sequence among the distinct ones (rows[owner[i]] holds the same tokens as row i)."""
    slot: dict[tuple[int, ...], int] = {}
    owner = [slot.setdefault(tuple(x), len(slot)) for x in seqs]
    first = [0] * len(slot)
    for i in reversed(range(len(seqs))):
        first[owner[i]] = i
    return first, owner


def _forward_parameters(model: Any) -> Any:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inspect.signature(base.forward).parameters


def keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes `logits_to_keep` (computes the output layer for the last positions
    only); a peft wrapper is looked through to its base model."""
    return "logits_to_keep" in _forward_parameters(model)


def cache_keyword(model: Any) -> str:
    """The forward argument (and output field) of the KV cache: transformers >= 5.2x names it `cache`,
    older versions `past_key_values`. A peft wrapper is looked through to its base model."""
    return "cache" if "cache" in _forward_parameters(model) else "past_key_values"
