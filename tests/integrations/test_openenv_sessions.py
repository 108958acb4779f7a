"""OpenEnv sessions under attack: a reset in the middle of an episode starts the new task cleanly (the old
episode ends; no 500, and nothing of it goes on under the new task's id), and an HTTP session belongs to
the client that opened it: its id is issued by the server, so a name another client chose or guesses
neither steps nor resets someone else's episode. Driven by OpenEnv's own client, raw WebSocket and raw
HTTP against a real `trialground env serve`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from interop_servers import Served, serve

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec

pytest.importorskip("openenv")
import websockets
from openenv.core.generic_client import GenericEnvClient

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

TOKEN = "openenv-session-token-0123456789"


def _task(name: str, body: str, check: str) -> Task:
    return Task(
        domain="code",
        prompt=f"Fix {name}() in solution.py.",
        files={"solution.py": body},
        hidden_checks={"test_hidden.py": f"from solution import {name}\n\n\ndef test_it():\n    {check}\n"},
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
    )


ADD = _task("add", "def add(a, b):\n    return a - b\n", "assert add(1, 2) == 3")
NEG = _task("neg", "def neg(a):\n    return a\n", "assert neg(2) == -2")
ADD_FIXED = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("openenv_sessions")
    (folder / "token").write_text(TOKEN)
    write_jsonl([ADD, NEG], folder / "tasks.jsonl")
    args = ["env", "serve", str(folder / "tasks.jsonl"), "--port", "0", "--token-file", str(folder / "token")]
    args += ["--max-sessions", "6", "--max-turns", "8"]
    with serve(args) as served:
        yield served


@pytest.fixture(scope="module")
def base_url(server: Served) -> str:
    return f"{server.url}/oe/{TOKEN}"


async def test_reset_mid_episode_with_the_openenv_client(base_url: str) -> None:
    async with GenericEnvClient(base_url=base_url) as env:
        first = await env.reset(task_id=ADD.id)
        assert first.observation["task_id"] == ADD.id
        await env.step({"tool": "write_file", "arguments": {"path": "solution.py", "content": ADD_FIXED}})
        second = await env.reset(task_id=NEG.id)  # mid-episode: the ADD episode is unfinished
        assert second.observation["task_id"] == NEG.id and second.observation["turn"] == 0
        seen = await env.step({"tool": "read_file", "arguments": {"path": "solution.py"}})
        assert seen.observation["text"] == NEG.files["solution.py"] and seen.observation["task_id"] == NEG.id
        end = await env.step({"tool": "submit"})
        # NEG's own unfixed file was graded: the fixed ADD workspace paid nothing here
        assert end.done and end.reward == 0.0 and not end.observation["verdict"]["passed"]
        assert end.observation["task_id"] == NEG.id
        state = await env.state()
        assert state["task_id"] == NEG.id and state["step_count"] == 2


async def test_reset_mid_episode_over_raw_websocket(server: Served) -> None:
    url = server.url.replace("http://", "ws://") + "/ws"
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:

        async def send(kind: str, data: dict) -> dict:
            await ws.send(json.dumps({"type": kind, "data": data}))
            return json.loads(await ws.recv())

        assert (await send("reset", {"task_id": ADD.id}))["type"] == "observation"
        await send("step", {"tool": "bash", "arguments": {"command": "echo x > marker"}})
        again = await send("reset", {"task_id": NEG.id})
        assert again["type"] == "observation", again
        assert again["data"]["observation"]["task_id"] == NEG.id
        ls = await send("step", {"tool": "bash", "arguments": {"command": "ls"}})
        assert "marker" not in ls["data"]["observation"]["text"]  # a fresh workspace for the new task


async def test_reset_mid_episode_over_http(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        r = (await http.post("/reset", json={"task_id": ADD.id})).json()
        eid = r["observation"]["episode_id"]
        step = {"episode_id": eid, "action": {"tool": "bash", "arguments": {"command": "echo x > marker"}}}
        assert (await http.post("/step", json=step)).status_code == 200
        again = await http.post("/reset", json={"episode_id": eid, "task_id": NEG.id})
        assert again.status_code == 200, again.text
        assert again.json()["observation"]["task_id"] == NEG.id
        ls = {"episode_id": eid, "action": {"tool": "bash", "arguments": {"command": "ls"}}}
        assert "marker" not in (await http.post("/step", json=ls)).json()["observation"]["text"]
        assert (await http.get("/state", params={"episode_id": eid})).json()["task_id"] == NEG.id


async def test_http_sessions_belong_to_their_client(base_url: str) -> None:
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=120) as alice,
        httpx.AsyncClient(base_url=base_url, timeout=120) as mallory,
    ):
        # Alice names her episode; the name is no key to it.
        opened = await alice.post("/reset", json={"task_id": ADD.id, "episode_id": "alice"})
        if opened.status_code == 200:
            eid = opened.json()["observation"]["episode_id"]
        else:  # a server may refuse client-chosen ids outright; then Alice opens one without
            assert opened.status_code in (404, 422)
            eid = (await alice.post("/reset", json={"task_id": ADD.id})).json()["observation"]["episode_id"]
        assert eid != "alice" and len(eid) >= 32  # issued by the server, unguessable
        write = {"tool": "write_file", "arguments": {"path": "solution.py", "content": ADD_FIXED}}
        # Mallory, holding the same shared token, tries the name Alice chose.
        hit = await mallory.post("/step", json={"episode_id": "alice", "action": write})
        assert hit.status_code == 404
        took = await mallory.post("/reset", json={"episode_id": "alice", "task_id": NEG.id})
        assert took.status_code in (404, 422)
        assert (await mallory.get("/state", params={"episode_id": "alice"})).status_code == 404
        # Alice's episode is as she left it
        state = (await alice.get("/state", params={"episode_id": eid})).json()
        assert state["task_id"] == ADD.id and state["step_count"] == 0
        ws_keys = await mallory.post("/step", json={"episode_id": "ws-0", "action": write})
        assert ws_keys.status_code == 404
