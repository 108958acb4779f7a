"""Sharded training on torch's own FSDP2 (`fully_shard`), on gloo (CPU) or nccl (CUDA).

`shard_model` shards every decoder layer, then the rest of the model (embeddings, final norm, output head)
as the root group: each rank keeps 1/N of every parameter as an fp32 `DTensor` shard, and the optimiser
built over those shards keeps 1/N of AdamW's state; gradients are reduce-scattered into shards. Before a
layer runs, its parameters are all-gathered (in bf16 when the run computes in bf16: `policy.dtype: bfloat16`
or `trainer.mixed_precision: bf16`) and freed again after its forward and backward, so a rank never holds
more than one layer's full weights beyond its shards. Gradients are reduced in fp32.

A layer is cast to fp32 just before it is sharded, so a model loaded in bf16 never exists in fp32 in full:
the fp32 master lives only as shards. With `trainer.cpu_offload`, shards, gradients and optimiser state
live in CPU memory (FSDP2's `CPUOffloadPolicy`) and each layer is copied to the device when it runs.

Exactness: FSDP2 averages gradients over ranks by default; the trainer's loss on each rank is already its
part of the whole batch's loss, so the reduction is made a plain sum (`set_gradient_divide_factor(1.0)` with
sum-only collectives, which is what gloo provides), as DDP's communication hook does.
"""

from __future__ import annotations

import torch
from torch import nn

from trialground.train.config import TrainerConfig
from trialground.train.precision import MasterWeights


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a transformers causal LM (`model.model.layers` and kin): the unit FSDP
    shards and gathers one at a time. ValueError when the model has none."""
    found: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            first = type(module[0])
            if all(type(m) is first for m in module) and any(p.numel() for p in module[0].parameters()):
                found = list(module)
                break
    if not found:
        raise ValueError(f"{type(model).__name__}: no list of decoder layers to shard")
    return found


def _to_fp32(module: nn.Module, *, recurse: bool) -> None:
    params = module.parameters() if recurse else module.parameters(recurse=False)
    for p in params:
        if p.is_floating_point() and p.dtype != torch.float32:
            p.data = p.data.float()


def shard_model(model: nn.Module, config: TrainerConfig, compute_dtype: torch.dtype) -> nn.Module:
    """Shard `model` in place across the default process group (see the module docstring); returns it.
    `compute_dtype` is what the forward and backward run in (bf16 or fp32)."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    mp = MixedPrecisionPolicy(
        param_dtype=None if compute_dtype == torch.float32 else compute_dtype, reduce_dtype=torch.float32
    )
    offload = CPUOffloadPolicy() if config.cpu_offload else OffloadPolicy()  # the base class: none
    layers = decoder_layers(model)
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    for layer in layers:
        _to_fp32(layer, recurse=True)  # one layer in fp32 at a time, then only its shard stays
        fully_shard(layer, mp_policy=mp, offload_policy=offload)
    for module in model.modules():  # what is left: embeddings, final norm, output head
        if not any(id(p) in in_layers for p in module.parameters(recurse=False)):
            _to_fp32(module, recurse=False)
    fully_shard(model, mp_policy=mp, offload_policy=offload)
    for module in model.modules():  # each group reduces its own gradients: every one sums
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether `model` was sharded by `shard_model` (its parameters are DTensors)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule) or any(isinstance(m, FSDPModule) for m in model.modules())


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Gradient accumulation: reduce-scatter in this backward (`sync`) or keep accumulating unsharded."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_requires_gradient_sync(sync, recurse=False)


def state_bytes(
    model: nn.Module, optimizer: torch.optim.Optimizer, masters: MasterWeights | None = None
) -> dict[str, int]:
    """Bytes this rank holds of parameters, gradients and optimiser state (fp32 masters of 16-bit weights
    included), counting only the local shard of a sharded tensor."""
    from torch.distributed.tensor import DTensor

    def size(t: torch.Tensor) -> int:
        local = t.to_local() if isinstance(t, DTensor) else t
        return local.numel() * local.element_size()

    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    stepped = masters.params if masters is not None else params
    extra = masters.state() if masters is not None else []
    return {
        "params": sum(size(p) for p in params),
        "grads": sum(size(p.grad) for p in stepped if p.grad is not None),
        "optimizer": sum(size(v) for v in [*state, *extra]),
    }


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Every rank writes its shards of the weights and AdamW state to the directory `path`
    (torch.distributed.checkpoint: one file per rank and a metadata file). A collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Every rank reads its shards back from `save_sharded`'s directory (a collective); the world size may
    differ from the one that saved (the checkpoint holds global tensors' pieces, not ranks')."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.load({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)  # fills them in place
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
