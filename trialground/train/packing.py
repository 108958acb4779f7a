"""Padding-free packing (`trainer.packing`): the sequences of a micro-batch run end to end in rows as long
as its longest sequence (first fit, longest first), with position ids that start again at 0 for each
sequence and no attention mask. transformers reads such position ids as packed sequences
(`masking_utils.find_packed_sequence_indices`) and keeps each sequence's attention to itself: a
block-diagonal causal mask for SDPA, eager and flex attention (sliding windows included), variable-length
kernels for flash attention, which transformers gives them for a batch of one row only: under flash
attention the micro-batch is one row (`one_row`), whose cost there is per sequence. What is left at a row's
end runs as one more short sequence of padding whose targets are dropped.

Rows no longer than the longest sequence keep attention's cost at most the padded micro-batch's (SDPA
with a mask computes every query against every key of its row: one row of all the sequences would cost
(sum of lengths)^2 instead of b x longest^2).

Whether a model's attention does this is measured, not assumed: `check_packing` runs two short sequences
packed and apart when the trainer is made, and refuses a model whose packed logits differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from trialground.tensors import final_hidden, head_logits
from trialground.train.pack_layout import pack_rows
from trialground.train.samples import Sample

__all__ = ["Packed", "check_packing", "one_row", "pack_rows"]


def one_row(model: nn.Module) -> bool:
    """Whether the model's attention packs into one row: transformers' flash-attention paths read packed
    sequences from the position ids of a batch of one row only, and cost per sequence, not per row."""
    return "flash" in str(getattr(getattr(model, "config", None), "_attn_implementation", ""))


class Packed:
    """A micro-batch as packed rows: input ids, position ids and targets [R, W]; `unpack` maps per-target
    values back to the padded layout [b, T]."""

    def __init__(self, chunk: Sequence[Sample], device: torch.device, single: bool = False) -> None:
        lengths = [len(s.ids) - 1 for s in chunk]  # a last token predicts nothing that is trained
        rows = pack_rows(lengths, single)
        self.width = sum(lengths) if single else max(lengths)
        self._layout = max(lengths)  # T of the unpacked [b, T] layout
        ids: list[list[int]] = []
        positions: list[list[int]] = []
        targets: list[list[int]] = []
        src: list[int] = []  # where each sample's targets sit in the flattened rows, in sample order
        starts: dict[int, int] = {}
        for r, members in enumerate(rows):
            row_ids: list[int] = []
            row_pos: list[int] = []
            row_tgt: list[int] = []
            for i in members:
                starts[i] = r * self.width + len(row_ids)
                row_ids += chunk[i].ids[:-1]
                row_pos += range(lengths[i])
                row_tgt += chunk[i].ids[1:]
            rest = self.width - len(row_ids)  # padding: a sequence of its own, attending to itself
            ids.append(row_ids + [0] * rest)
            positions.append(row_pos + list(range(rest)))
            targets.append(row_tgt + [0] * rest)
        for i, n in enumerate(lengths):
            src += range(starts[i], starts[i] + n)
        as_tensor = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
        self.ids, self.positions, self.targets = as_tensor(ids), as_tensor(positions), as_tensor(targets)
        self._src = as_tensor(src)
        self._dest = as_tensor([i * self._layout + t for i, n in enumerate(lengths) for t in range(n)])
        self._samples = len(chunk)

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """[R, W, ...] per-target values of the rows -> [b, T, ...] right-padded with zeros (T the longest
        sequence's targets: the layout of unpacked micro-batches); differentiable."""
        flat = values.reshape(-1, *values.shape[2:])  # [R*W, ...]
        out = flat.new_zeros((self._samples * self._layout, *flat.shape[1:]))
        out = out.index_copy(0, self._dest, flat.index_select(0, self._src))
        return out.reshape(self._samples, self._layout, *flat.shape[1:])

    def hidden(self, model: nn.Module) -> torch.Tensor:
        """The model's final hidden states [R, W, d] over the rows."""
        hidden, _ = final_hidden(model, input_ids=self.ids, position_ids=self.positions, use_cache=False)
        return hidden


def check_packing(model: nn.Module) -> None:
    """Refuse a model whose attention crosses packed sequences or ignores their position ids."""
    device = next(model.parameters()).device
    first = Sample(ids=[5, 6, 7, 8, 9, 10], mask=[1] * 5, old_logprobs=None, advantage=0.0)
    second = Sample(ids=[9, 10, 11], mask=[1, 1], old_logprobs=None, advantage=0.0)
    third = Sample(ids=[12, 13, 14], mask=[1, 1], old_logprobs=None, advantage=0.0)
    chunk = [first, second, third]  # one row of 5 positions, one of 2 + 2 + 1 of padding
    packed = Packed(chunk, device, one_row(model))
    tol = 1e-4 if next(model.parameters()).dtype == torch.float32 else 3e-2
    with torch.no_grad():
        logits = packed.unpack(head_logits(model, packed.hidden(model)))  # [3, 5, V]
        for row, s in enumerate(chunk):
            alone, _ = final_hidden(model, input_ids=torch.tensor([s.ids[:-1]], device=device))
            expected = head_logits(model, alone)[0]  # [n, V]
            if not torch.allclose(logits[row, : len(expected)], expected, rtol=tol, atol=tol):
                raise ValueError(
                    f"{type(model).__name__}: packed sequences do not keep to themselves in its attention "
                    f"({getattr(model.config, '_attn_implementation', '?')}); set trainer.packing: false"
                )
