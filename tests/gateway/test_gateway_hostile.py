"""What a harness program sends and what the model writes cannot make the gateway fail: request bodies too
deep or with huge numbers are 4xx with a message, and a model's tool call with hostile JSON comes back as
text (the program sees what the model wrote), through a real local server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


def _session(responses: list[str]) -> Session:
    policy = ScriptedPolicy(responses, tokenizer=load_tokenizer("tiny-agent"))
    return Session(policy, SamplingParams(max_new_tokens=64), "tiny-agent", tool_role="user")


async def test_deep_or_huge_number_bodies_are_4xx_with_a_message(gateway: Gateway) -> None:
    ep = gateway.open(_session(["x"]))
    headers = {"Authorization": f"Bearer {ep.key}", "Content-Type": "application/json"}
    bodies = {
        "nested": "[" * 200_000 + "]" * 200_000,
        "digits": '{"messages": [{"role": "user", "content": "hi"}], "n": ' + "9" * 5000 + "}",
    }
    async with httpx.AsyncClient(base_url=gateway.url + ep.path, headers=headers, timeout=60) as client:
        for expected, body in bodies.items():
            for route in ("/chat/completions", "/completions"):
                r = await client.post(route, content=body)
                assert r.status_code == 400, (route, r.status_code, r.text[:300])
                assert expected in r.json()["error"]["message"]


@pytest.mark.parametrize("inner", ["9" * 5000, "[" * 5000 + "]" * 5000])
async def test_a_tool_call_with_hostile_json_comes_back_as_text(gateway: Gateway, inner: str) -> None:
    text = '<tool_call>{"name": "bash", "arguments": {"x": ' + inner + "}}</tool_call>"
    ep = gateway.open(_session([text]))
    headers = {"Authorization": f"Bearer {ep.key}"}
    body = {
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": 100_000,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    }
    async with httpx.AsyncClient(base_url=gateway.url + ep.path, headers=headers, timeout=60) as client:
        r = await client.post("/chat/completions", json=body)
    assert r.status_code == 200, r.text[:300]
    message = r.json()["choices"][0]["message"]
    assert not message.get("tool_calls") and "<tool_call>" in message["content"]
