"""A program that opens connection after connection to the gateway cannot raise the training process's
descriptor count past the gateway's cap (it held one descriptor per connection, +9,000 in a review)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from trialground.gateway.connections import DEFAULT_MAX_CONNECTIONS
from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams

FLOOD = 320  # connections the program opens and holds

# Opens FLOOD connections to the socket, says how many it holds, then waits to be killed.
HOLDER = """
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
    except OSError:
        break
    held.append(s)
print(len(held), flush=True)
time.sleep(300)
"""


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway()
    await gw.start()
    yield gw
    await gw.stop()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_connection_flood_holds_at_most_the_cap_of_descriptors(gateway: Gateway) -> None:
    before = _fds()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(gateway.socket_path), str(FLOOD)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = await asyncio.to_thread(holder.stdout.readline)
        assert int(line) == FLOOD  # the kernel accepted them all into the backlog or the gateway
        await asyncio.sleep(1.0)  # let the event loop accept what is pending
        grown = _fds() - before
        assert grown <= DEFAULT_MAX_CONNECTIONS + 8, grown
    finally:
        holder.kill()
        holder.wait()
    # and a session is answered once the flood is gone
    ep = gateway.open(Session(ScriptedPolicy(["pong"], tokenizer=load_tokenizer("tiny-agent")),
                              SamplingParams(max_new_tokens=8), "policy"))  # fmt: skip
    transport = httpx.AsyncHTTPTransport(uds=str(gateway.socket_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=60) as client:
        r = await client.post(
            ep.path + "/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {ep.key}"},
        )
    assert r.status_code == 200
