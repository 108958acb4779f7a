"""`/v1/responses` through the gateway with the real `openai` SDK on a real local server: a tool-using
episode records the same prompt and sampled ids as the same episode over chat completions (streamed or
not), and what the route does not do (hosted tools, stored responses, constrained decoding, alternatives
the policy under training cannot give) is a 400 that names the field."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.gateway.stitch import stitch
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams

CALL = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
SCRIPT = ["let me look " + CALL, CALL, "the answer is 42"]
CHAT_TOOLS: Any = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
TOOLS: Any = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


def _open(gw: Gateway) -> tuple[Session, openai.AsyncOpenAI]:
    policy = ScriptedPolicy(SCRIPT, tokenizer=load_tokenizer("tiny-agent"))
    session = Session(policy, SamplingParams(max_new_tokens=64), "tiny-agent", tool_role="user")
    ep = gw.open(session)
    return session, openai.AsyncOpenAI(base_url=gw.url + ep.path, api_key=ep.key, max_retries=0)


async def _responses_episode(client: openai.AsyncOpenAI, *, stream: bool) -> list[Any]:
    items: list[Any] = [{"role": "user", "content": "go"}]
    finals = []
    for _ in range(3):
        kw: Any = {"model": "tiny-agent", "input": items, "instructions": "Use tools.", "tools": TOOLS}
        if stream:
            async with client.responses.stream(**kw) as events:
                response: Any = await events.get_final_response()
        else:
            response = await client.responses.create(**kw)
        finals.append(response)
        items += [o.model_dump(exclude_none=True) for o in response.output]
        for o in response.output:
            if o.type == "function_call":
                items.append({"type": "function_call_output", "call_id": o.call_id, "output": "a.txt"})
    return finals


async def _chat_episode(client: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "go"}]
    for _ in range(3):
        reply = await client.chat.completions.create(model="tiny-agent", messages=messages, tools=CHAT_TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})


def _ids(session: Session) -> list[Any]:
    return [(r.prompt_ids, [c.token_ids for c in r.choices]) for r in session.records]


async def test_a_responses_episode_records_what_the_chat_episode_does(gateway: Gateway) -> None:
    chat_session, chat = _open(gateway)
    await _chat_episode(chat)
    for stream in (False, True):
        session, client = _open(gateway)
        finals = await _responses_episode(client, stream=stream)
        assert _ids(session) == _ids(chat_session)
        assert (stitch(session.records).segments, stitch(session.records).rewrites) == (1, 0)
        first, _, last = finals
        assert [o.type for o in first.output] == ["message", "function_call"]
        assert first.output_text == "let me look" and first.status == "completed"
        call = first.output[1]
        assert call.type == "function_call" and json.loads(call.arguments) == {"command": "ls"}
        assert last.output_text == "the answer is 42" and last.usage is not None
        assert last.usage.output_tokens == len(session.records[2].choices[0].token_ids)


async def test_a_cut_response_is_incomplete_and_streams_its_events(gateway: Gateway) -> None:
    _, client = _open(gateway)
    stream = await client.responses.create(model="tiny-agent", input="go", max_output_tokens=2, stream=True)
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final: Any = events[-1]
    assert (
        final.response.status == "incomplete"
        and final.response.incomplete_details.reason == "max_output_tokens"
    )
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.response.output_text and deltas


async def test_what_is_not_served_is_refused_by_field(gateway: Gateway) -> None:
    _, client = _open(gateway)
    responses: list[tuple[dict[str, Any], str]] = [
        ({"previous_response_id": "resp_1"}, "previous_response_id: this server stores no responses"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format: type 'json_schema'"),
        ({"tools": [{"type": "web_search"}]}, "tools[0]: type 'web_search' is not supported"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "'input_image' is not supp"),
        ({"top_logprobs": 3}, "top_logprobs: this server reports the sampled token's logprob only"),
    ]  # fmt: skip
    for extra, message in responses:
        body: Any = {"model": "tiny-agent", "input": "go", **extra}
        with pytest.raises(openai.BadRequestError, match=message.replace("[", r"\[").replace("]", r"\]")):
            await client.responses.create(**body)
    ask: Any = [{"role": "user", "content": "go"}]
    chats: list[tuple[dict[str, Any], str]] = [
        ({"response_format": {"type": "json_object"}}, "response_format: type 'json_object' is not"),
        ({"extra_body": {"guided_json": {"type": "object"}}}, "guided_json: constrained decoding"),
        ({"logprobs": True, "top_logprobs": 2}, "top_logprobs: this server reports the sampled token's"),
        ({"top_logprobs": 2}, "top_logprobs: needs logprobs: true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs: Input should be less than or equal to 20"),
    ]  # fmt: skip
    for extra, message in chats:
        with pytest.raises(openai.BadRequestError, match=message):
            await client.chat.completions.create(model="tiny-agent", messages=ask, **extra)
    with pytest.raises(openai.BadRequestError, match="logprobs: this server reports"):
        await client.completions.create(model="tiny-agent", prompt="go", logprobs=2)
    # the sampled token's logprob is still there, with no invented alternatives
    reply = await client.chat.completions.create(
        model="tiny-agent", messages=ask, logprobs=True, top_logprobs=0
    )
    content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else None
    assert content and all(t.logprob == -1.0 and t.top_logprobs == [] for t in content)
