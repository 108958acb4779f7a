"""Which sequences share a packed row (`trainer.packing`): the layout alone, from the sequences' lengths, so
that the micro-batch sizing in `train.samples` and the packed forward in `train.packing` use one rule."""

from __future__ import annotations

from collections.abc import Sequence


def pack_rows(lengths: Sequence[int], single: bool = False) -> list[list[int]]:
    """Indices into `lengths` per row: first fit, longest first, each row at most max(lengths) long (or,
    `single`, all in one row)."""
    width = sum(lengths) if single else max(lengths)
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, free in enumerate(room) if free >= lengths[i]), None)
        if row is None:
            rows.append([])
            room.append(width)
            row = len(rows) - 1
        rows[row].append(i)
        room[row] -= lengths[i]
    return rows
