"""`top_logprobs` through the training gateway, as `policy serve` gives them: the k likeliest tokens of
the sampled distribution at each position, from the policy under training (the tiny HF model, real
`openai` SDK over a real local port). A backend that cannot give them is refused with a 400, as before."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig

ASK = [{"role": "user", "content": "List the files."}]


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


async def test_top_logprobs_come_from_the_policy_under_training(gateway: Gateway) -> None:
    policy = HFPolicy(PolicyConfig(model="tiny-agent"))
    session = Session(policy, SamplingParams(max_new_tokens=8), "policy", alternatives=policy.alternatives)
    ep = gateway.open(session)
    client = openai.AsyncOpenAI(base_url=gateway.url + ep.path, api_key=ep.key, max_retries=0)
    for sampling in ({"temperature": 0.0}, {"temperature": 0.8, "top_p": 0.9, "seed": 3}):
        reply = await client.chat.completions.create(
            model="policy",
            messages=ASK,
            logprobs=True,
            top_logprobs=4,
            **sampling,  # type: ignore[arg-type]
        )
        content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
        assert content
        for entry in content:
            values = [t.logprob for t in entry.top_logprobs]
            assert len(values) == 4 and values == sorted(values, reverse=True)
            assert values[0] >= entry.logprob - 1e-4
            same = [t.logprob for t in entry.top_logprobs if t.token == entry.token]
            assert not same or abs(same[0] - entry.logprob) < 1e-3
        if sampling["temperature"] == 0.0:
            assert all(e.top_logprobs[0].token == e.token for e in content)
    out = await client.completions.create(model="policy", prompt="def f(x):", max_tokens=4, logprobs=3)
    logprobs = out.choices[0].logprobs
    assert logprobs is not None and logprobs.top_logprobs and logprobs.tokens
    for token, top in zip(logprobs.tokens, logprobs.top_logprobs, strict=True):
        assert 3 <= len(top) <= 4 and token in top
    assert len(session.records) == 3  # recorded like any other call


async def test_a_backend_without_alternatives_is_refused(gateway: Gateway) -> None:
    policy = ScriptedPolicy(["pong"], tokenizer=load_tokenizer("tiny-agent"))
    ep = gateway.open(
        Session(policy, SamplingParams(max_new_tokens=8), "policy", alternatives=policy.alternatives)
    )
    client = openai.AsyncOpenAI(base_url=gateway.url + ep.path, api_key=ep.key, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="gives no alternatives"):
        await client.chat.completions.create(model="policy", messages=ASK, logprobs=True, top_logprobs=2)  # type: ignore[arg-type]
