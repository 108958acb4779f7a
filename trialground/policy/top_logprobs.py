"""The most likely tokens at each sampled position, for OpenAI's `top_logprobs` (chat) and `logprobs: k`
(completions).

One forward pass of the HF policy's model over prompt + sampled ids (its output layer a chunk of positions
at a time), processed as sampling processed it
(`hf._process_logits`: temperature, top_k, top_p, min_p), so the sampled token's entry equals its sampling
logprob. A token the processing removed has logprob -inf, written as -9999.0 (JSON has no infinity; vLLM
writes the same).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trialground.policy.backends.hf.hf import HFPolicy, _process_logits, completion_logits
from trialground.policy.base import SamplingParams

MAX_TOP_LOGPROBS = 20  # OpenAI's bound, and vLLM's default `--max-logprobs`
FLOOR = -9999.0

# per sampled position: (token id, logprob) of the k most likely tokens, most likely first
Alternatives = list[list[tuple[int, float]]]


@torch.no_grad()
def top_logprobs(
    policy: HFPolicy, prompt: Sequence[int], completion: Sequence[int], params: SamplingParams, k: int
) -> Alternatives:
    if not 1 <= k <= MAX_TOP_LOGPROBS:
        raise ValueError(f"k: {k} is outside 1..{MAX_TOP_LOGPROBS}")
    if not completion:
        return []
    out: Alternatives = []
    for _start, logits in completion_logits(policy.model, prompt, completion, policy.device):
        logp = _process_logits(logits, params.temperature, params.top_p, params.top_k, params.min_p)
        values, index = logp.topk(min(k, logp.shape[-1]), dim=-1)  # [n, k]
        out += [
            [(int(t), max(float(v), FLOOR)) for v, t in zip(vs, ts, strict=True)]
            for vs, ts in zip(values.tolist(), index.tolist(), strict=True)
        ]
    return out
