"""A finished chat or completions answer as the chunks OpenAI's `stream=True` sends (framed by `sse.py`).

The answer is the one the non-streaming route returns, built and recorded by `Session` the same way
(its token ids, logprobs and policy version go into the episode's records before the first chunk is
sent), so streaming changes what the program reads, never what is trained. Per choice: a first chunk
with the role, the content in pieces at token boundaries, each tool call whole (id, name, arguments), and
a last chunk with the `finish_reason`, the choice's logprobs (the SDK appends them to what it gathered)
and the sampled `token_ids`. The concatenated deltas are the non-streaming message exactly. With
`stream_options.include_usage` every chunk has `"usage": null` and one more chunk, with no choices,
carries the usage.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from trialground.gateway.api import Sampling


def pieces(text: str, tokenizer: Any) -> list[str]:
    """`text` cut where the tokenizer's tokens of it end (one piece where it cannot say). The pieces are
    slices of `text`, so they join to exactly it."""
    if not text:
        return []
    try:
        spans = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        ends = sorted({int(end) for _, end in spans if 0 < int(end) < len(text)})
    except (NotImplementedError, TypeError, KeyError, ValueError):  # a slow tokenizer has no offsets
        return [text]
    cuts = [0, *ends, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts) if b > a]


def _head(reply: dict[str, Any], kind: str, req: Sampling) -> dict[str, Any]:
    head = {"id": reply["id"], "object": kind, "created": reply["created"], "model": reply["model"]}
    if req.include_usage:
        head["usage"] = None
    return head


def chat_chunks(reply: dict[str, Any], tokenizer: Any, req: Sampling) -> Iterator[dict[str, Any]]:
    """The chunks of a `chat.completion` answer (`Session.chat`)."""
    head = _head(reply, "chat.completion.chunk", req)
    first = {"prompt_token_ids": reply.get("prompt_token_ids"), "policy_version": reply.get("policy_version")}
    for choice in reply["choices"]:
        index, message = choice["index"], choice["message"]

        def chunk(delta: dict[str, Any], **fields: Any) -> dict[str, Any]:
            out = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}  # noqa: B023
            return {**head, "choices": [{**out, **fields}]}

        yield {**chunk({"role": "assistant", "content": ""}), **first}
        first = {}
        for piece in pieces(message.get("content") or "", tokenizer):
            yield chunk({"content": piece})
        for k, call in enumerate(message.get("tool_calls") or ()):
            yield chunk({"tool_calls": [{"index": k, **call}]})
        yield chunk(
            {},
            logprobs=choice.get("logprobs"),
            finish_reason=choice["finish_reason"],
            token_ids=choice.get("token_ids"),
        )
    if req.include_usage:
        yield {**head, "choices": [], "usage": reply["usage"]}


def completion_chunks(reply: dict[str, Any], tokenizer: Any, req: Sampling) -> Iterator[dict[str, Any]]:
    """The chunks of a `text_completion` answer (`Session.complete`)."""
    head = _head(reply, "text_completion", req)
    for choice in reply["choices"]:
        base = {"index": choice["index"], "logprobs": None, "finish_reason": None, "stop_reason": None}
        for piece in pieces(choice["text"], tokenizer):
            yield {**head, "choices": [{**base, "text": piece}]}
        last = {k: choice[k] for k in ("logprobs", "finish_reason", "stop_reason") if k in choice}
        if "token_ids" in choice:
            last["token_ids"] = choice["token_ids"]
        yield {**head, "choices": [{**base, "text": "", **last}]}
    if req.include_usage:
        yield {**head, "choices": [], "usage": reply["usage"]}
