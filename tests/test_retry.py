"""Client retries (`trialground.retry`) against a real local HTTP server: a 429 with Retry-After is waited
out and then answered, a server that always 503s is given up on after the bounded tries with a clear
error; the same through the three clients that use them (openai and remote policy backends, the judge)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from app_server import serve
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from trialground.errors import PolicyError, VerifierError
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.retry import Backoff, RetriesExhausted, retry_after_s, send_with_retries
from trialground.tasks.model import Task, VerifierSpec

CHOICE = {
    "index": 0,
    "text": "hi",
    "token_ids": [5, 6],
    "logprobs": {"token_logprobs": [-0.5, -0.25]},
    "finish_reason": "length",
}
CHAT = {
    "index": 0,
    "finish_reason": "stop",
    "message": {"role": "assistant", "content": "Fine.\nSCORE: 1"},
}


@dataclass
class Script:
    """What the server answers: `plan` statuses first (then 200), 429s carrying `retry_after`."""

    plan: list[int] = field(default_factory=list)
    retry_after: str | None = None
    seen: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, path) per request

    def reset(self, plan: list[int], retry_after: str | None = None) -> None:
        self.plan, self.retry_after, self.seen = list(plan), retry_after, []


def _app(script: Script) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/{route:path}")
    async def answer(route: str, request: Request) -> Any:
        script.seen.append((time.monotonic(), route))
        status = script.plan.pop(0) if script.plan else 200
        if status == 429:
            headers = {"Retry-After": script.retry_after} if script.retry_after else {}
            return JSONResponse({"error": "slow down"}, status_code=429, headers=headers)
        if status != 200:
            return JSONResponse({"error": "unavailable"}, status_code=status)
        if route == "chat/completions":
            return {"choices": [CHAT]}
        return {"choices": [CHOICE]}

    return app


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Script]]:
    script = Script()
    with serve(_app(script), lifespan="off") as url:
        yield url, script


FAST = Backoff(attempts=3, base_s=0.05, max_wait_s=1.0, total_s=60.0)


def test_retry_after_in_seconds_and_as_a_date() -> None:
    def with_header(value: str) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": value})

    assert retry_after_s(with_header("3")) == 3.0
    assert retry_after_s(with_header("0.5")) == 0.5
    now = time.time()
    assert retry_after_s(with_header(formatdate(now + 30, usegmt=True)), now=now) == pytest.approx(30, abs=1)
    assert retry_after_s(with_header(formatdate(now - 30, usegmt=True)), now=now) == 0.0
    assert retry_after_s(with_header("soon")) is None and retry_after_s(with_header("-1")) is None
    assert retry_after_s(httpx.Response(503)) is None


def test_waits_grow_exponentially_with_jitter_and_are_capped() -> None:
    backoff = Backoff(attempts=10, base_s=1.0, max_wait_s=8.0)
    for retry, full in enumerate([1.0, 2.0, 4.0, 8.0, 8.0, 8.0]):
        waits = {backoff.wait_s(retry) for _ in range(50)}
        assert all(full / 2 <= w <= full for w in waits) and len(waits) > 1, (retry, waits)
    with pytest.raises(ValueError):
        Backoff(attempts=0)


async def test_429_with_retry_after_is_waited_out_then_answered(served: tuple[str, Script]) -> None:
    url, script = served
    script.reset([429, 429], retry_after="1")
    async with httpx.AsyncClient() as client:
        resp = await send_with_retries(lambda _n: client.post(url + "/v1/completions", json={}), FAST)
    assert resp.status_code == 200 and len(script.seen) == 3
    gaps = [b[0] - a[0] for a, b in zip(script.seen, script.seen[1:], strict=False)]
    assert all(gap >= 0.95 for gap in gaps), gaps  # the server asked for 1 s, far above FAST's waits


async def test_a_server_that_always_503s_is_given_up_on(served: tuple[str, Script]) -> None:
    url, script = served
    script.reset([503] * 10)
    async with httpx.AsyncClient() as client:
        with pytest.raises(RetriesExhausted, match=r"after 3 tries: .*/v1/completions: HTTP 503") as err:
            await send_with_retries(lambda _n: client.post(url + "/v1/completions", json={}), FAST)
    assert err.value.tries == 3 and err.value.response is not None and len(script.seen) == 3
    # 4xx other than 429 is the caller's to judge: returned at once
    script.reset([404])
    async with httpx.AsyncClient() as client:
        resp = await send_with_retries(lambda _n: client.post(url + "/v1/completions", json={}), FAST)
    assert resp.status_code == 404 and len(script.seen) == 1


async def test_a_retry_after_beyond_the_budget_gives_up_at_once(served: tuple[str, Script]) -> None:
    url, script = served
    script.reset([429], retry_after="3600")
    started = time.monotonic()
    async with httpx.AsyncClient() as client:
        with pytest.raises(RetriesExhausted, match=r"3600 s Retry-After.*60 s retry budget.*HTTP 429"):
            await send_with_retries(lambda _n: client.post(url + "/v1/completions", json={}), FAST)
    assert len(script.seen) == 1 and time.monotonic() - started < 60


async def test_connection_refused_is_retried_and_named() -> None:
    with socket.socket() as s:  # a port nothing listens on any more
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    async with httpx.AsyncClient() as client:
        with pytest.raises(RetriesExhausted, match=f"failed after 3 tries: {dead}/x: ConnectError"):
            await send_with_retries(lambda _n: client.post(dead + "/x"), FAST)


def _policy_config(**extra: Any) -> PolicyConfig:
    return PolicyConfig(max_retries=2, retry_base_s=0.05, **extra)


async def test_openai_policy_backs_off_on_429_and_gives_up_on_503(served: tuple[str, Script]) -> None:
    from trialground.policy.backends.openai.openai import OpenAIPolicy

    url, script = served
    policy = OpenAIPolicy(_policy_config(backend="openai", base_url=url))
    script.reset([429], retry_after="1")
    (g,) = await policy.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4))
    assert g.text == "hi" and len(script.seen) == 2 and script.seen[1][0] - script.seen[0][0] >= 0.95
    script.reset([503] * 10)
    with pytest.raises(PolicyError, match=r"failed after 3 tries: .*HTTP 503") as err:
        await policy.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4))
    assert err.value.kind == "http" and len(script.seen) == 3


async def test_remote_policy_backs_off_on_429_and_gives_up_on_503(served: tuple[str, Script]) -> None:
    pytest.importorskip("transformers")
    from trialground.policy.backends.remote.remote import RemotePolicy
    from trialground.policy.backends.scripted.scripted import load_tokenizer

    url, script = served
    config = _policy_config(backend="remote", servers=(url,), served_model="tiny")
    policy = RemotePolicy(config, tokenizer=load_tokenizer("tiny"))
    try:
        script.reset([429], retry_after="1")
        (g,) = await policy.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2))
        assert g.token_ids == (5, 6) and g.logprobs == (-0.5, -0.25)
        assert len(script.seen) == 2 and script.seen[1][0] - script.seen[0][0] >= 0.95
        script.reset([503] * 10)
        with pytest.raises(PolicyError, match=rf"completion failed after 3 tries: {url}/v1/completions"):
            await policy.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2))
        assert len(script.seen) == 3 and policy.requests == [5]
    finally:
        policy.close()


async def test_judge_backs_off_on_429_and_gives_up_on_503(served: tuple[str, Script]) -> None:
    from trialground.verify.judges.judge import OpenAIJudge

    url, script = served
    task = Task(domain="qa", prompt="Name the capital of France.", verifier=VerifierSpec(kind="judge"))
    judge = OpenAIJudge(url + "/v1", "judge", timeout_s=60, retry_base_s=0.05)
    try:
        script.reset([429], retry_after="1")
        assert await judge.score(task, "Paris") == 1.0
        assert len(script.seen) == 2 and script.seen[1][0] - script.seen[0][0] >= 0.95
        script.reset([503] * 10)
        with pytest.raises(VerifierError, match=r"judge endpoint failed after 3 tries: .*HTTP 503") as err:
            await judge.score(task, "Paris")
        assert err.value.kind == "judge_http" and len(script.seen) == 3
    finally:
        await judge.close()
