"""Streaming through the gateway (`stream=True` of the real `openai` SDK, on a real local server): the same
message as without streaming, the SSE framing OpenAI's clients expect, and the same recorded token ids, so
a streaming program's episode trains on exactly what a non-streaming one would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from trialground.gateway.server import Endpoint, Gateway
from trialground.gateway.session import Session
from trialground.gateway.stitch import stitch
from trialground.gateway.streaming import pieces
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams

CALL = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
TOOLS: Any = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
SCRIPT = ["let me look " + CALL, "now " + CALL, "all done: the answer is 42, été ✓"]


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


def _open(gw: Gateway) -> tuple[Session, Endpoint, openai.AsyncOpenAI]:
    policy = ScriptedPolicy(SCRIPT, tokenizer=load_tokenizer("tiny-agent"))
    session = Session(policy, SamplingParams(max_new_tokens=64), "tiny-agent", tool_role="user")
    ep = gw.open(session)
    return session, ep, openai.AsyncOpenAI(base_url=gw.url + ep.path, api_key=ep.key, max_retries=0)


async def _episode(client: openai.AsyncOpenAI, *, stream: bool) -> list[dict[str, Any]]:
    """Three calls, each continuing the last: the program sends back what it read."""
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for _ in range(3):
        kw: Any = {"model": "tiny-agent", "messages": messages, "tools": TOOLS, "logprobs": True}
        if stream:  # gathered by the SDK's own accumulator, as agent frameworks do
            state: Any = ChatCompletionStreamState()
            async for chunk in await client.chat.completions.create(**kw, stream=True):
                state.handle_chunk(chunk)
            reply: Any = state.get_final_completion()
        else:
            reply = await client.chat.completions.create(**kw)
        message = reply.choices[0].message
        messages.append({k: v for k, v in message.model_dump(exclude_none=True).items() if k != "parsed"})
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})
    return messages


def _comparable(messages: list[dict[str, Any]]) -> list[Any]:
    """Messages without the per-call ids (fresh on every answer)."""
    out = []
    for m in messages:
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", [])]
        out.append((m["role"], m.get("content"), calls))
    return out


async def test_a_streamed_episode_reads_and_records_what_an_unstreamed_one_does(gateway: Gateway) -> None:
    plain_session, _, plain = _open(gateway)
    streamed_session, _, streamed = _open(gateway)
    assert _comparable(await _episode(streamed, stream=True)) == _comparable(
        await _episode(plain, stream=False)
    )
    # the records the trainer stitches: prompt ids and sampled ids, call for call
    ids = [[(r.prompt_ids, [c.token_ids for c in r.choices]) for r in s.records] for s in
           (plain_session, streamed_session)]  # fmt: skip
    assert len(ids[0]) == 3 and ids[0] == ids[1]
    joined = stitch(streamed_session.records)
    assert (joined.segments, joined.rewrites) == (1, 0)


async def test_sse_framing_usage_and_n(gateway: Gateway) -> None:
    _, ep, _ = _open(gateway)
    body = {
        "model": "tiny-agent", "messages": [{"role": "user", "content": "go"}], "n": 2, "logprobs": True,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    async with httpx.AsyncClient(base_url=gateway.url + ep.path) as http:
        resp = await http.post("/chat/completions", json=body, headers={"Authorization": f"Bearer {ep.key}"})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = resp.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: {") for e in events[:-2])
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    *body_chunks, usage = chunks
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    assert all(c["usage"] is None for c in body_chunks)
    for index in (0, 1):
        mine = [c["choices"][0] for c in body_chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert [c["finish_reason"] for c in mine[:-1]] == [None] * (len(mine) - 1)
        assert mine[-1]["finish_reason"] == "stop" and mine[-1]["token_ids"]
        assert "".join(c["delta"].get("content", "") for c in mine) == SCRIPT[index]
        assert len(mine[-1]["logprobs"]["content"]) == len(mine[-1]["token_ids"])


async def test_completions_stream_and_stream_options_without_stream(gateway: Gateway) -> None:
    client = _open(gateway)[2]
    plain = await client.completions.create(model="tiny-agent", prompt="go", max_tokens=64)
    client = _open(gateway)[2]  # a fresh script: the same answer again
    text = ""
    async for chunk in await client.completions.create(
        model="tiny-agent", prompt="go", max_tokens=64, stream=True
    ):
        text += chunk.choices[0].text
        finish = chunk.choices[0].finish_reason
    assert text == plain.choices[0].text and finish == plain.choices[0].finish_reason
    with pytest.raises(openai.BadRequestError, match="stream_options: only allowed when stream"):
        await client.completions.create(
            model="tiny-agent", prompt="go", stream_options={"include_usage": True}
        )


def test_pieces_join_to_the_text_at_token_boundaries() -> None:
    tok = load_tokenizer("tiny-agent")
    for text in ["", "x", SCRIPT[2], "  leading and trailing  ", "<|im_end|> inside"]:
        cut = pieces(text, tok)
        assert "".join(cut) == text and all(cut)
    assert len(pieces(SCRIPT[2], tok)) > 5
