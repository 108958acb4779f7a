"""The trained weights as plain full tensors, one at a time: what a sampler, an inference server's weight
push and the Hugging Face export read from the trainer.

`named_weights` yields `(name, tensor)` in the model's state-dict order, with plain Hugging Face names: LoRA
deltas merged into their base weights (no peft prefixes, no adapter tensors), each FSDP-sharded parameter
gathered from its shards just before it is yielded (so a rank never holds more than one gathered parameter
beyond what the caller keeps), and cast to `dtype` when one is given. `weight_buckets` groups them into
lists of at most `bucket_bytes` (a tensor larger than that is a bucket alone), the unit a weight push sends.

Gathering a shard is a collective: under FSDP every rank must iterate the same weights in the same order
(`Trainer.weight_buckets` asks the other ranks to). Without sharding nothing is copied unless `dtype`
differs from the weight's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

DEFAULT_BUCKET_BYTES = 256 * 1024 * 1024


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _lora_deltas(base: nn.Module) -> dict[str, Any]:
    """Plain weight name -> the peft LoRA layer whose delta is merged into it."""
    from peft.tuners.lora import LoraLayer

    return {f"{name}.weight": m for name, m in base.named_modules() if isinstance(m, LoraLayer)}


def _delta(layer: Any, dtype: torch.dtype) -> torch.Tensor:
    """B @ A * scaling of the default adapter, from full (gathered) A and B."""
    a = _full(layer.lora_A["default"].weight.detach()).float()
    b = _full(layer.lora_B["default"].weight.detach()).float()
    delta = (b @ a) * layer.scaling["default"]
    return (delta.T if getattr(layer, "fan_in_fan_out", False) else delta).to(dtype)


@torch.no_grad()
def named_weights(
    model: nn.Module, *, lora: bool, dtype: torch.dtype | None = None, merge: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """Full-model weights one at a time (see the module docstring). `lora`: `model` is a peft model;
    `merge` False: its base weights without the adapter (what a server that loads adapters starts from)."""
    base: Any = model.get_base_model() if lora else model  # type: ignore[operator]
    deltas = _lora_deltas(base) if lora and merge else {}
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        tensor = _full(value.detach())
        if name in deltas:
            tensor = tensor + _delta(deltas[name], tensor.dtype)
        yield name, tensor if dtype is None else tensor.to(dtype)


def weight_buckets(
    model: nn.Module,
    *,
    lora: bool,
    dtype: torch.dtype | None = None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """`named_weights` in lists of at most `bucket_bytes` each (a larger tensor alone)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_weights(model, lora=lora, dtype=dtype):
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
