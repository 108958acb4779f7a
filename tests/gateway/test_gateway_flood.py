"""One harness program flooding the gateway (hundreds of connections, calls past every budget, large
bodies, from a real subprocess over real HTTP on its session's kernel-picked port) cannot hold more of
the training process's descriptors than its session's budget, cannot draw more generations than its
budget, is ended with the reason recorded, and does not keep another session's requests from being
answered within the bound `docs/harness.md` states. On the old gateway (one listener with 256
connections for every session) the flood's connections crowded the other session out."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest

from trialground.gateway.budget import SessionBudget
from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import Generation, SamplingParams

HOLD = 300  # connections the program opens and holds
BOUND_S = 5.0  # docs/harness.md: another session's request, under one flood, on a loaded 2-core machine
HI = {"messages": [{"role": "user", "content": "hi"}]}

# argv: port, base path, key. Holds HOLD connections, and from 12 threads posts calls past every budget
# (n=64, then n=2 until refused, a 3 MB body) for 4 s; prints "go" once the connections are opened.
FLOODER = r"""
import http.client, json, socket, sys, threading, time
port, path, key, hold = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
held = []
for _ in range(hold):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        s.send(b"POST " + path.encode() + b"/chat/completions HTTP/1.1\r\n")  # headers never finished
    except OSError:
        pass
    held.append(s)
print("go", flush=True)
bodies = [
    {"messages": [{"role": "user", "content": "hi"}], "n": 64},
    {"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 4096},
    {"messages": [{"role": "user", "content": "x" * 3_000_000}]},
]
def worker(i):
    end = time.time() + 4
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            body = json.dumps(bodies[i % 3])
            c.request("POST", path + "/chat/completions", body,
                      {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
            c.getresponse().read()
            c.close()
        except Exception:
            time.sleep(0.01)
threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
for t in threads: t.start()
for t in threads: t.join()
print("done", flush=True)
time.sleep(300)
"""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _policy() -> ScriptedPolicy:
    return ScriptedPolicy(["pong"], tokenizer=load_tokenizer("tiny-agent"))


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


async def test_a_flooding_session_stays_in_its_budget_and_another_is_answered(gateway: Gateway) -> None:
    budget = SessionBudget.for_episode(3, 2, 8, 2, connections=4, body_mb=4)
    flood_policy, other_policy = _policy(), _policy()
    flooding = Session(flood_policy, SamplingParams(max_new_tokens=8), "policy", budget=budget)
    other = Session(other_policy, SamplingParams(max_new_tokens=8), "policy", budget=budget)
    a, b = gateway.open(flooding), gateway.open(other)
    assert a.url is not None and b.url is not None and a.url != b.url
    await asyncio.sleep(0.2)  # both listeners accepting
    before = _fds()
    flooder = subprocess.Popen(
        [sys.executable, "-c", FLOODER, a.url.rsplit(":", 1)[1], a.path, a.key, str(HOLD)],
        stdout=subprocess.PIPE,
        text=True,
    )
    waits, most_fds = [], 0
    try:
        assert flooder.stdout is not None
        assert (await asyncio.to_thread(flooder.stdout.readline)).strip() == "go"
        headers = {"Authorization": f"Bearer {b.key}"}
        async with httpx.AsyncClient(base_url=b.url + b.path, headers=headers, timeout=60) as client:
            for i in range(3):  # the other session's calls, spread over the flood
                most_fds = max(most_fds, _fds())
                t0 = time.perf_counter()
                r = await client.post("/chat/completions", json=HI)
                waits.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
                most_fds = max(most_fds, _fds())
                await asyncio.sleep(0.5 if i < 2 else 0)
        done = (await asyncio.to_thread(flooder.stdout.readline)).strip()
        assert done == "done"
        most_fds = max(most_fds, _fds())
    finally:
        flooder.kill()
        flooder.wait()
    # descriptors: the flooding session's connections, the other's one and the test client's end of it,
    # the pipe from the flooder
    assert most_fds - before <= budget.connections + 3, (most_fds - before, budget.descriptors)
    assert max(waits) < BOUND_S, waits
    assert len(flood_policy.calls) <= budget.generations  # one row per generation drawn
    assert flooding.ended.is_set() and flooding.spent.exhausted is not None
    assert "connections open at once" in flooding.spent.exhausted
    assert not other.ended.is_set() and len(other_policy.calls) == 3


async def test_a_session_listener_serves_its_own_session_only(gateway: Gateway) -> None:
    a = gateway.open(Session(_policy(), SamplingParams(max_new_tokens=8), "policy"))
    b = gateway.open(Session(_policy(), SamplingParams(max_new_tokens=8), "policy"))
    assert a.url is not None
    async with httpx.AsyncClient(base_url=a.url, timeout=60) as client:
        auth = {"Authorization": f"Bearer {b.key}"}
        assert (await client.post(b.path + "/chat/completions", json=HI, headers=auth)).status_code == 401
        assert (await client.post("/v1/chat/completions", json=HI, headers=auth)).status_code == 401
        auth = {"Authorization": f"Bearer {a.key}"}
        assert (await client.post("/v1/chat/completions", json=HI, headers=auth)).status_code == 200
    gateway.close(a.sid)
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as client:
            await client.get("/health")


class Counting(ScriptedPolicy):
    """The scripted policy, counting the tokens it generates."""

    generated = 0

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        gens = await super().generate(prompts, params)
        self.generated += sum(len(g.token_ids) for g in gens)
        return gens


async def test_the_token_budget_is_never_overshot(gateway: Gateway) -> None:
    """max_tokens is cut to what the budget has left for the call's rows before generating; a session
    with not one token per row left is ended (it overshot by n x max_new_tokens before)."""
    policy = Counting(["word " * 40], tokenizer=load_tokenizer("tiny-agent"))
    budget = SessionBudget(calls=10, max_n=4, generations=40, tokens=30, inflight=4)
    session = Session(policy, SamplingParams(max_new_tokens=64), "policy", budget=budget)
    ep = gateway.open(session)
    headers = {"Authorization": f"Bearer {ep.key}"}
    codes = []
    async with httpx.AsyncClient(base_url=gateway.url + ep.path, headers=headers, timeout=60) as client:
        r = await client.post("/chat/completions", json={**HI, "n": 2, "max_tokens": 64})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 30
        while r.status_code == 200 and len(codes) < 10:
            r = await client.post("/completions", json={"prompt": ["a", "b"], "n": 2, "max_tokens": 64})
            codes.append(r.status_code)
    assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted", codes
    assert policy.generated <= budget.tokens, (policy.generated, codes)
    assert session.spent.tokens == policy.generated
    assert session.ended.is_set() and "tokens" in (session.spent.exhausted or "")


async def test_a_sessions_body_bound_and_inflight_count_come_before_the_body_is_read(
    gateway: Gateway,
) -> None:
    budget = SessionBudget.for_episode(3, 2, 8, 1, body_mb=1)
    session = Session(_policy(), SamplingParams(max_new_tokens=8), "policy", budget=budget)
    ep = gateway.open(session)
    assert ep.url is not None
    headers = {"Authorization": f"Bearer {ep.key}"}
    async with httpx.AsyncClient(base_url=ep.url + ep.path, headers=headers, timeout=60) as client:
        big = {"messages": [{"role": "user", "content": "x" * (2 << 20)}]}
        r = await client.post("/chat/completions", json=big)
        assert r.status_code == 413 and f"over {1 << 20} bytes" in r.text
        session.spent.inflight = 1  # one request of the episode in flight: the next waits its turn
        r = await client.post("/chat/completions", json=big)
        assert r.status_code == 429 and "in flight" in r.text and not session.ended.is_set()
        session.spent.inflight = 0
        assert (await client.post("/chat/completions", json=HI)).status_code == 200
