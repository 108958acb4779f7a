"""Logprobs in the shapes OpenAI's routes return them.

`logprob` is always the sampling logprob of the sampled token (`Generation.logprobs`). The alternatives
(`top_logprobs` of chat, `logprobs: k` of completions) come from a `TopSource` where the server has one
(the reference server: `policy/top_logprobs.py`; the training gateway: `Policy.alternatives`, which the
HF policy answers and other backends answer None), most likely first; where there is none they are
refused, never invented.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trialground.policy.base import Generation, SamplingParams

# per sampled position: (token id, logprob) of the k most likely tokens, most likely first
Alternatives = list[list[tuple[int, float]]]
# (prompt ids, the generation, the sampling it was drawn with, k) -> its alternatives (None: none to give)
TopSource = Callable[[Sequence[int], Generation, SamplingParams, int], Awaitable[Alternatives | None]]


def _piece(tok: Any, token: int) -> str:
    return str(tok.decode([token], skip_special_tokens=False))


def _entry(tok: Any, token: int, logprob: float) -> dict[str, Any]:
    piece = _piece(tok, token)
    return {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}


def chat_logprobs(tok: Any, g: Generation, tops: Alternatives | None) -> list[dict[str, Any]]:
    """`choice.logprobs.content`: one entry per sampled token, with its `top_logprobs` (empty without
    alternatives) and the token id (an extension, as vLLM's `return_token_ids`)."""
    out = []
    for i, (t, lp) in enumerate(zip(g.token_ids, g.logprobs, strict=True)):
        top = [_entry(tok, a, alp) for a, alp in tops[i]] if tops is not None else []
        out.append({**_entry(tok, t, lp), "top_logprobs": top, "token_id": t})
    return out


def completion_logprobs(
    tok: Any, g: Generation, tops: Alternatives | None, *, ids_as_names: bool
) -> dict[str, Any]:
    """`choice.logprobs` of a completion: tokens, their logprobs, per position the alternatives plus the
    sampled token (as vLLM returns `logprobs: k`), and text offsets."""
    pieces = [_piece(tok, t) for t in g.token_ids]

    def name(token: int, piece: str | None = None) -> str:
        return f"token_id:{token}" if ids_as_names else (piece if piece is not None else _piece(tok, token))

    names = [name(t, p) for t, p in zip(g.token_ids, pieces, strict=True)]
    top = []
    for i, (n, lp) in enumerate(zip(names, g.logprobs, strict=True)):
        here = {name(a): alp for a, alp in tops[i]} if tops is not None else {}
        top.append({**here, n: lp})
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return {"tokens": names, "token_logprobs": list(g.logprobs), "top_logprobs": top, "text_offset": offsets}
