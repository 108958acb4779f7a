"""The gateway over a policy, through the real `openai` SDK on a real local server (port 0): chat with
tools, n, logprobs, stop, max_tokens, temperature; completions; keys per session; token-exact stitching
and segments for rewritten histories."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

import openai
import pytest

from trialground.gateway.server import Endpoint, Gateway
from trialground.gateway.session import Session
from trialground.gateway.stitch import stitch
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import Generation, SamplingParams
from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored
from trialground.train.trainer import build_samples

CALL = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


class Recording(ScriptedPolicy):
    """The scripted policy, remembering the sampling parameters of each call."""

    def __init__(self, responses: Sequence[str]) -> None:
        super().__init__(responses, tokenizer=load_tokenizer("tiny-agent"))
        self.params: list[SamplingParams] = []

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        self.params.append(params)
        return await super().generate(prompts, params)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


def _client(gw: Gateway, ep: Endpoint, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + ep.path, api_key=key or ep.key, max_retries=0)


def _session(policy: ScriptedPolicy, **kw: object) -> Session:
    return Session(policy, SamplingParams(max_new_tokens=64), "tiny-agent", tool_role="user", **kw)  # type: ignore[arg-type]


async def test_chat_with_tools_n_logprobs_and_sampling_fields(gateway: Gateway) -> None:
    policy = Recording(["thinking " + CALL])
    session = _session(policy)
    ep = gateway.open(session)
    reply = await _client(gateway, ep).chat.completions.create(
        model="tiny-agent", messages=[{"role": "user", "content": "list files"}], tools=TOOLS,  # type: ignore[list-item]
        tool_choice="auto", n=2, temperature=0.3, max_tokens=50, stop=["STOP"], logprobs=True,
    )  # fmt: skip
    assert len(reply.choices) == 2
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls or []
        assert call.function.name == "bash" and json.loads(call.function.arguments) == {"command": "ls"}
        assert choice.message.content == "thinking"
        assert choice.logprobs is not None and choice.logprobs.content
        assert all(t.logprob == -1.0 for t in choice.logprobs.content)
    (params,) = policy.params
    assert (params.temperature, params.max_new_tokens, params.stop) == (0.3, 50, ("STOP",))
    (record,) = session.records
    assert len(record.choices) == 2 and record.prompt_ids == tuple(policy.calls[0])
    # tool_choice="none": the text comes back as text
    reply = await _client(gateway, ep).chat.completions.create(
        model="tiny-agent",
        messages=[{"role": "user", "content": "x"}],
        tools=TOOLS,
        tool_choice="none",  # type: ignore[list-item]
    )
    assert reply.choices[0].message.tool_calls is None and "<tool_call>" in (
        reply.choices[0].message.content or ""
    )


async def test_keys_are_per_session_and_bad_requests_are_4xx(gateway: Gateway) -> None:
    a, b = gateway.open(_session(Recording(["x"]))), gateway.open(_session(Recording(["y"])))
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.AuthenticationError):
        await _client(gateway, a, key="tg-wrong").chat.completions.create(
            model="tiny-agent", messages=messages
        )  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError):  # b's key on a's base URL
        await _client(gateway, a, key=b.key).chat.completions.create(model="tiny-agent", messages=messages)  # type: ignore[arg-type]
    client = _client(gateway, a)
    with pytest.raises(openai.BadRequestError, match="seed"):
        await client.chat.completions.create(model="tiny-agent", messages=messages, seed=10**30)  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        await client.chat.completions.create(model="other", messages=messages)  # type: ignore[arg-type]
    gateway.close(a.sid)
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(model="tiny-agent", messages=messages)  # type: ignore[arg-type]


async def test_completions_with_token_ids(gateway: Gateway) -> None:
    policy = Recording(["abc"])
    session = _session(policy)
    ep = gateway.open(session)
    out = await _client(gateway, ep).completions.create(
        model="tiny-agent", prompt=[5, 6, 7], max_tokens=8, logprobs=0
    )
    assert out.choices[0].logprobs is not None and out.choices[0].logprobs.token_logprobs
    assert policy.calls == [[5, 6, 7]] and session.records[0].prompt_ids == (5, 6, 7)


async def test_calls_that_extend_each_other_are_one_trajectory(gateway: Gateway) -> None:
    policy = Recording([CALL, CALL, "done"])
    session = _session(policy)
    ep = gateway.open(session)
    client = _client(gateway, ep)
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    for _ in range(3):
        reply = await client.chat.completions.create(model="tiny-agent", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt <|end|> b.txt"})
    joined = stitch(session.records)
    assert (joined.segments, joined.rewrites) == (1, 0)
    assert [t.role for t in joined.turns] == ["prompt", "policy", "env", "policy", "env", "policy"]
    # every prompt the policy saw is the previous prompt + the sampled ids + the env turn, id for id
    context: list[int] = []
    for turn in joined.turns:
        context += turn.token_ids
    assert policy.calls[-1] == context[: len(policy.calls[-1])]
    sampled = [t.token_ids for t in joined.turns if t.role == "policy"]
    assert sampled == [r.choices[0].token_ids for r in session.records]


async def test_a_rewritten_history_becomes_segments_that_train_apart(gateway: Gateway) -> None:
    policy = Recording([CALL, CALL, "done"])
    session = _session(policy)
    ep = gateway.open(session)
    client = _client(gateway, ep)
    first = [{"role": "user", "content": "go"}]
    reply = await client.chat.completions.create(model="tiny-agent", messages=first, tools=TOOLS)  # type: ignore[arg-type]
    m = reply.choices[0].message.model_dump(exclude_none=True)
    second = [*first, m, {"role": "tool", "tool_call_id": "x", "content": "out"}]
    await client.chat.completions.create(model="tiny-agent", messages=second, tools=TOOLS)  # type: ignore[arg-type]
    # the program drops its history (a summary instead): the prompt no longer extends the last call's
    third = [{"role": "user", "content": "go (summary: ran ls)"}]
    await client.chat.completions.create(model="tiny-agent", messages=third, tools=TOOLS)  # type: ignore[arg-type]
    joined = stitch(session.records)
    assert (joined.segments, joined.rewrites) == (2, 1)
    traj = Trajectory(task_id="t", group_id="g", sample_index=0, policy_version=0, turns=joined.turns)
    segs = traj.segments()
    assert len(segs) == 2 and segs[1].prompt == list(session.records[2].prompt_ids)
    samples = build_samples([Scored(traj, 1.0, 0.5)])
    assert len(samples) == 2 and all(s.advantage == 0.5 for s in samples)
    assert samples[1].ids == [*session.records[2].prompt_ids, *session.records[2].choices[0].token_ids]
