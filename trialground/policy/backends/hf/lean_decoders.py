"""Which lean decoder samples a model: the first of `DECODERS` that computes it exactly, else None (the
caller samples through transformers' forward). `policy.decode: auto` uses it per batch."""

from __future__ import annotations

from torch import nn

from trialground.policy.backends.hf.gemma_decode import Gemma3Decoder
from trialground.policy.backends.hf.llama_decode import LlamaDecoder

# Llama, Mistral, Qwen2, Qwen3 (llama_decode.py); Gemma 3 (gemma_decode.py)
DECODERS: tuple[type[LlamaDecoder], ...] = (LlamaDecoder, Gemma3Decoder)


def decoder_class(model: nn.Module, length: int | None = None) -> type[LlamaDecoder] | None:
    """The decoder that runs `model` exactly for sequences of up to `length` tokens, or None."""
    return next((d for d in DECODERS if d.refusal(model, length) is None), None)


def refusals(model: nn.Module, length: int | None = None) -> list[str]:
    """Each decoder's reason for refusing `model` (empty when one takes it)."""
    reasons = [d.refusal(model, length) for d in DECODERS]
    return [] if None in reasons else [f"{d.__name__}: {r}" for d, r in zip(DECODERS, reasons, strict=True)]
