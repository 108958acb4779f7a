"""Log-probabilities and entropies of target tokens, a chunk of positions at a time through the output
layer, so no `tokens x vocabulary` fp32 logits exist beyond one chunk -- in the forward pass and in the
backward pass.

The model's forward runs up to its final hidden states (`tensors.final_hidden`: its own forward, so the
hooks of FSDP, DDP and peft run as usual, with the output layer run on no position). The hidden states
are then cut into chunks of at most `chunk` positions; each chunk's logits are made, reduced to the
target's logprob (and, without gradient, the entropy) and dropped. When there is more than one chunk,
each is a `torch.utils.checkpoint` region: its backward makes the chunk's logits again from the saved
hidden states, so the backward too holds one chunk of logits at a time (the price: the output layer runs
twice forward). A single chunk keeps its logits for the backward, as the plain path would.

At a 262,144-token vocabulary a chunk of 512 positions is 0.5 GiB of fp32 logits, against 16 GiB for
16,384 positions at once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from trialground.tensors import final_hidden, head_logits


def _chunk_logprobs(
    model: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs [n] of `targets` [n] under the logits at `hidden` [n, d] / temperature, and entropies."""
    logits = head_logits(model, hidden) / temperature  # [n, V] fp32
    lse = torch.logsumexp(logits, dim=-1)  # [n]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse  # [n]
    ent = None
    if entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)  # [n, V]
            ent = lse - (probs * logits).sum(-1)  # [n]
    return logp, ent


def token_logprobs(
    model: nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float,
    entropy: bool,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs [b, T] of `targets` [b, T] under the model's logits at `hidden` [b, T, d] divided by
    `temperature`, and optionally entropies [b, T] (no gradient), at most `chunk` positions at a time."""
    b, t, d = hidden.shape
    flat, goal = hidden.reshape(b * t, d), targets.reshape(b * t)
    regions = torch.is_grad_enabled() and flat.requires_grad and b * t > chunk
    logps: list[torch.Tensor] = []
    ents: list[torch.Tensor] = []
    for start in range(0, b * t, chunk):
        part = slice(start, start + chunk)
        if regions:
            out: Any = checkpoint(
                _chunk_logprobs, model, flat[part], goal[part], temperature, entropy, use_reentrant=False
            )
        else:
            out = _chunk_logprobs(model, flat[part], goal[part], temperature, entropy)
        logps.append(out[0])
        if out[1] is not None:
            ents.append(out[1])
    logp = torch.cat(logps).reshape(b, t)
    return logp, torch.cat(ents).reshape(b, t) if entropy else None


def check_head(model: nn.Module) -> None:
    """Refuse a model whose logits `head_logits` does not reproduce (a scale the model applies after its
    output layer that is not a final soft cap), before any training: one forward of two tokens."""
    param = next(model.parameters())
    ids = torch.tensor([[0, 1]], device=param.device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits.float()  # [1, 2, V]
        hidden, _ = final_hidden(model, input_ids=ids)
        got = head_logits(model, hidden)
    tol = 1e-4 if param.dtype == torch.float32 else 3e-2
    if got.shape != expected.shape or not torch.allclose(got, expected, rtol=tol, atol=tol):
        raise ValueError(
            f"{type(model).__name__}: its logits are not its output layer's (and a final soft cap), so the "
            "trainer's chunked log-probabilities (train.chunked_logprobs) cannot reproduce them"
        )
