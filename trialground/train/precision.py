"""The trainer's dtype: its weights are in the dtype the config names, the same on every rank, and a
16-bit weight is stepped through an fp32 master copy that lives with the optimiser's state.

`trainer_dtype` is the one rule every rank applies to `policy.dtype`: `bfloat16` trains bf16 weights;
`float32` trains fp32 throughout; `float16` trains in fp32 (fp16 gradients overflow without the loss scaling
the trainer does not do). So in the embedded default with `policy.dtype: bfloat16` the trainer updates the
very bf16 module the policy samples with (no second copy of the model), and ranks > 0 load the same dtype.

A 16-bit parameter cannot take AdamW's steps itself: most updates are below half a unit of its last place
and would round away. `MasterWeights` keeps an fp32 copy of each 16-bit trainable parameter (the optimiser
steps the copy; the parameter then takes the rounded value), so a bf16 run holds 2 bytes of weights, 2 of
gradient, 4 of master and 8 of AdamW moments per trained parameter, against 4 + 4 + 8 in fp32 -- and the
sampler shares the 2. The masters are optimiser state: checkpoints save them (`master.pt`) and resume
continues from them, not from the rounded weights. Gradients accumulate over micro-batches in the
parameter's dtype and are cast to fp32 before clipping.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

_TRAINED = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float32}


def trainer_dtype(policy_dtype: str) -> torch.dtype:
    """The dtype the trainer holds its weights in for `policy.dtype` (see the module docstring)."""
    try:
        return _TRAINED[policy_dtype]
    except KeyError:
        raise ValueError(
            f"policy.dtype {policy_dtype!r}: expected one of {', '.join(sorted(_TRAINED))}"
        ) from None


class MasterWeights:
    """fp32 master copies of a model's 16-bit trainable parameters (fp32 ones are stepped directly)."""

    def __init__(self, params: Sequence[nn.Parameter]) -> None:
        self._params = list(params)
        self._copies = [
            p if p.dtype == torch.float32 else nn.Parameter(p.detach().float().clone()) for p in self._params
        ]

    @staticmethod
    def needed(params: Sequence[nn.Parameter]) -> bool:
        """Whether any trainable parameter is 16-bit (else the optimiser steps the parameters themselves)."""
        return any(p.dtype != torch.float32 for p in params)

    @property
    def params(self) -> list[nn.Parameter]:
        """What the optimiser steps: the masters of 16-bit parameters, the fp32 parameters themselves."""
        return self._copies

    def take_grads(self) -> list[nn.Parameter]:
        """Before clipping: each master's gradient is its parameter's, in fp32. Returns `params`."""
        for p, m in zip(self._params, self._copies, strict=True):
            if m is not p:
                m.grad = None if p.grad is None else p.grad.detach().float()
                p.grad = None
        return self._copies

    @torch.no_grad()
    def write_back(self) -> None:
        """After the optimiser step: each 16-bit parameter takes its master's value, rounded. The copy moves
        the parameter's version counter, so a sampler sharing the module sees the change."""
        for p, m in zip(self._params, self._copies, strict=True):
            if m is not p:
                p.copy_(m)
                m.grad = None

    def state(self) -> list[torch.Tensor]:
        """The masters of the 16-bit parameters, in parameter order (for checkpoints and replication)."""
        return [m.detach() for p, m in zip(self._params, self._copies, strict=True) if m is not p]

    @torch.no_grad()
    def load(self, state: Sequence[torch.Tensor]) -> None:
        """Restore `state()`; the 16-bit parameters take the rounded values."""
        masters = [m for p, m in zip(self._params, self._copies, strict=True) if m is not p]
        if len(masters) != len(state):
            raise ValueError(f"{len(state)} saved master weights for {len(masters)} 16-bit parameters")
        for m, saved in zip(masters, state, strict=True):
            if m.shape != saved.shape:
                raise ValueError(f"a saved master weight of shape {tuple(saved.shape)} for {tuple(m.shape)}")
            m.copy_(saved)
        self.write_back()
