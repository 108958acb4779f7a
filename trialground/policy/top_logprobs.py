"""The most likely tokens at each sampled position, for OpenAI's `top_logprobs` (chat) and `logprobs: k`
(completions).

One forward pass of the HF policy's model over prompt + sampled ids, processed as sampling processed it
(`hf._process_logits`: temperature, top_k, top_p, min_p), so the sampled token's entry equals its sampling
logprob. A token the processing removed has logprob -inf, written as -9999.0 (JSON has no infinity; vLLM
writes the same). The computation is the HF backend's (`hf.top_logprobs`, also behind
`HFPolicy.alternatives`, which the training gateway uses).
"""

from __future__ import annotations

from trialground.policy.backends.hf.hf import FLOOR, MAX_TOP_LOGPROBS, top_logprobs

# per sampled position: (token id, logprob) of the k most likely tokens, most likely first
Alternatives = list[list[tuple[int, float]]]

__all__ = ["FLOOR", "MAX_TOP_LOGPROBS", "Alternatives", "top_logprobs"]
