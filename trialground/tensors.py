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


def final_hidden(model: Any, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """Run a causal LM's own forward (so wrappers' hooks run: FSDP, DDP, peft) and return its final hidden
    states [b, T, d] -- the output layer's input -- with the forward's output. The output layer itself runs
    on no position (`logits_to_keep` of none), so no `T x vocabulary` logits exist; a model whose forward
    has no `logits_to_keep` computes them and they are dropped. `head_logits` turns a chunk of the hidden
    states into logits."""
    seen: list[torch.Tensor] = []

    def keep(_module: Any, _args: Any, out: Any) -> None:
        seen.append(out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0])

    handle = model.get_decoder().register_forward_hook(keep)
    try:
        if keeps_logits(model):
            inputs["logits_to_keep"] = torch.zeros(0, dtype=torch.long, device=inputs["input_ids"].device)
        out = model(**inputs)
    finally:
        handle.remove()
    if len(seen) != 1:
        raise RuntimeError(f"{type(model).__name__}: its decoder ran {len(seen)} times in one forward")
    return seen[0], out


def head_logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The model's logits [..., V] at `hidden` [..., d] (fp32), as its forward computes them: the output
    layer, then the final soft cap where the model has one (Gemma 2)."""
    logits = model.get_output_embeddings()(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits  # type: ignore[no-any-return]
