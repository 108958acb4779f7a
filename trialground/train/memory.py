"""The trainer's memory options: gradient checkpointing and bf16 mixed precision.

Gradient checkpointing is transformers' own (`activation_checkpointing_enable`, non-reentrant
`torch.utils.checkpoint`): each decoder layer keeps only its input and recomputes its activations in the
backward pass. transformers checkpoints a layer only while that layer is in training mode, and the trainer
keeps the model in eval mode (dropout off, so the ratio compares one function); so the checkpointed layers
alone -- not their submodules, where dropout lives -- are flagged as training. Under `no_grad` (sampling,
recomputed logprobs) nothing is checkpointed. A recomputed layer would write the shared prompt's KV cache a
second time, hence `TrainerConfig` refuses checkpointing together with `share_prompt`.

Mixed precision runs the forward passes under `torch.autocast(bfloat16)` (CPU or CUDA): matrix products
in bf16, reductions and the loss in fp32 (`Trainer._token_logprobs` casts the logits to float); the
weights, their gradients and AdamW's state stay in the model's own dtype.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from trialground.train.config import TrainerConfig


def enable_checkpointing(model: nn.Module) -> int:
    """Turn on gradient checkpointing of every decoder layer of `model` (a transformers model, or a peft
    model around one). Returns how many layers are checkpointed; 0 raises (the model has none)."""
    hf: Any = model
    enable = getattr(hf, "activation_checkpointing_enable", None)
    if callable(enable):
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # transformers before 5.x: the older name
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for layer in layers:
        layer.training = True  # the flag transformers checks; submodules (dropout) stay in eval mode
    if not layers:
        raise ValueError(f"{type(model).__name__} has no layers that support gradient checkpointing")
    return len(layers)


def autocast(config: TrainerConfig, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The context of the trainer's forward passes: bf16 autocast when `mixed_precision: bf16`."""
    if config.mixed_precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
