"""The text of a completion: what tool-call parsing and stop strings see.

`skip_special_tokens=True` drops every token a tokenizer marks special, and some tokenizers mark their
tool-call tags (`<tool_call>`, `</tool_call>`) special: every call would vanish from the text and every
turn fail with "no tool call found". So only the tokenizer's control tokens (bos, eos, pad, unk, sep,
cls, mask) are dropped; every other token, special or not, is decoded as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_CONTROL = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")


def control_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokenizer's control tokens (those named in `_CONTROL` that it has)."""
    ids = set()
    for name in _CONTROL:
        token = getattr(tokenizer, name, None)
        if isinstance(token, str):
            tid = tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int):
                ids.add(tid)
    return frozenset(ids)


def completion_text(tokenizer: Any, ids: Sequence[int], control: frozenset[int] | None = None) -> str:
    """`ids` decoded without the control tokens; `control` (from `control_ids`) saves the look-up."""
    drop = control_ids(tokenizer) if control is None else control
    return str(tokenizer.decode([i for i in ids if i not in drop], skip_special_tokens=False))
