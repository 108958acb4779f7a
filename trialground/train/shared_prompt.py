"""The shared-prompt pass: the k samples of a task share their prompt, so each distinct prompt of a
micro-batch runs once (left-padded, so all end at the same slot) and its KV cache rows are indexed out to
the samples; the completions then attend to that cache. Gradients flow back through the shared prompt
activations, so loss and gradients equal those of full sequences (tests compare both), for ~half the
tokens at GRPO shapes.

With gradient checkpointing a checkpointed decoder layer runs again in the backward pass, and with it its
write to the KV cache. Each pass therefore gets its own cache whose writes replay (`replayable`): a
layer's first write in the pass records the layer's state before it, and a later write -- the recomputation
-- starts again from that state, so it returns the very keys and values the forward pass used and leaves
the cache as the forward left it. The completions' cache is a copy of the prompts' (rows selected), so
the two passes never write into one cache.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

from trialground.tensors import cache_keyword, distinct_rows, final_hidden, left_pad
from trialground.train.samples import Sample


def replayable(cache: Any) -> Any:
    """Make each layer's write into `cache` (used for one forward pass) repeatable (module docstring)."""
    from transformers.cache_utils import DynamicLayer

    if not cache.layers or not all(isinstance(layer, DynamicLayer) for layer in cache.layers):
        kinds = sorted({type(layer).__name__ for layer in cache.layers}) or ["none built up front"]
        raise ValueError(
            f"the shared-prompt pass needs key/value cache layers it can replay, got {', '.join(kinds)}: "
            "set trainer.share_prompt: false for this model"
        )
    before: dict[int, dict[str, Any]] = {}
    write = cache.update  # the class's own, bound

    def update(keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *a: Any, **k: Any) -> Any:
        state = vars(cache.layers[layer_idx])
        if layer_idx in before:  # a checkpointed layer recomputed: from the state its forward started with
            state.clear()
            state.update(before[layer_idx])
        else:
            before[layer_idx] = dict(state)
        return write(keys, values, layer_idx, *a, **k)

    cache.update = update
    return cache


def _rows_of(cache: Any, rows: torch.Tensor) -> Any:
    """A new cache holding `rows` of `cache`'s (a differentiable index), which `cache` does not see."""
    out = copy.copy(cache)
    vars(out).pop("update", None)  # the copy gets its own replay
    out.layers = [copy.copy(layer) for layer in cache.layers]
    out.batch_select_indices(rows)
    return replayable(out)


def shared_prompt_hidden(
    model: nn.Module, chunk: Sequence[Sample], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states [b, C, d] predicting each completion token, and those tokens [b, C]
    (right-padded). Only what is trained is run: no completion's last token, which predicts nothing."""
    from transformers import DynamicCache

    prompts = [s.ids[: s.prompt_len] for s in chunk]
    first, owner = distinct_rows(prompts)
    p_ids, p_mask = left_pad([prompts[r] for r in first], pad_id, device)
    rows = torch.tensor(owner, device=device)
    cache_kw = cache_keyword(model)
    prompt_cache = replayable(DynamicCache(config=cast(Any, model).config))
    p_hidden, _ = final_hidden(
        model,
        input_ids=p_ids,
        attention_mask=p_mask,
        position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        **{cache_kw: prompt_cache},
    )
    length = max(len(s.ids) - s.prompt_len for s in chunk)
    c_ids = torch.full((len(chunk), length), pad_id, dtype=torch.long)
    c_mask = torch.zeros((len(chunk), length), dtype=torch.long)
    for i, s in enumerate(chunk):
        done = s.ids[s.prompt_len :]
        c_ids[i, : len(done)] = torch.tensor(done, dtype=torch.long)
        c_mask[i, : len(done)] = 1
    c_ids, c_mask = c_ids.to(device), c_mask.to(device)
    first_hidden = p_hidden[:, -1:][rows]  # [b, 1, d] the prompt's last position predicts token 0
    if length == 1:
        return first_hidden, c_ids
    positions = p_mask.sum(-1)[rows].unsqueeze(1) + torch.arange(length - 1, device=device)
    rest, _ = final_hidden(
        model,
        input_ids=c_ids[:, :-1],
        attention_mask=torch.cat([p_mask[rows], c_mask[:, :-1]], dim=1),
        position_ids=positions,
        use_cache=True,
        **{cache_kw: _rows_of(prompt_cache, rows)},
    )
    return torch.cat([first_hidden, rest], dim=1), c_ids  # [b, C, d]
