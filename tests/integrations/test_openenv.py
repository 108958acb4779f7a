"""`trialground env serve` driven by OpenEnv's own client package (`openenv-core`): real ToolEnv episodes in
real sandboxes to a graded end, over the WebSocket session and the HTTP routes; the session limit, the
token, idle reaping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from interop_servers import Served, serve

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec

pytest.importorskip("openenv")
from openenv.core.generic_client import GenericEnvClient
from websockets.exceptions import ConnectionClosed

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

TOKEN = "openenv-test-token-0123456789"
IDLE_S = 2.0
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
IMPORT = "from solution import add\n\n\n"


def add_task() -> Task:
    return Task(
        domain="code",
        prompt="Fix add() in solution.py so the tests pass.",
        files={"solution.py": BUGGY},
        visible_checks={"test_visible.py": f"{IMPORT}def test_small():\n    assert add(1, 2) == 3\n"},
        hidden_checks={
            "test_hidden.py": f"{IMPORT}def test_big():\n    assert add(10, 20) == 30\n\n\n"
            "def test_neg():\n    assert add(-1, -2) == -3\n"
        },
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 2}),
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("openenv")
    (folder / "token").write_text(TOKEN)
    write_jsonl([add_task()], folder / "tasks.jsonl")
    args = ["env", "serve", str(folder / "tasks.jsonl"), "--port", "0", "--token-file", str(folder / "token")]
    args += ["--max-sessions", "2", "--idle-s", str(IDLE_S), "--max-turns", "6"]
    with serve(args) as served:
        yield served


@pytest.fixture(scope="module")
def base_url(server: Served) -> str:
    return f"{server.url}/oe/{TOKEN}"


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


async def test_a_client_plays_episodes_to_a_graded_end(base_url: str) -> None:
    async with GenericEnvClient(base_url=base_url) as env:
        result = await env.reset(episode_id="first")
        obs = result.observation
        assert not result.done and result.reward is None
        assert "Fix add()" in obs["text"] and "run_tests" in obs["text"] and obs["episode_id"] == "first"
        result = await env.step({"tool": "bash", "arguments": {"command": "cat solution.py; ls"}})
        assert (
            "return a - b" in result.observation["text"] and "test_hidden" not in result.observation["text"]
        )
        result = await env.step(
            {"message": "Fixing it.\n" + call("write_file", path="solution.py", content=FIXED)}
        )
        assert not result.done and "solution.py" in result.observation["text"]
        result = await env.step({"tool": "run_tests"})
        assert "1 passed" in result.observation["text"], result.observation
        result = await env.step({"tool": "submit"})
        # outcome 1, plus the default shaping (a process bonus for testing before submitting)
        assert result.done and result.reward is not None and result.reward >= 1.0
        assert result.observation["reward_components"]["outcome"] == 1.0
        assert result.observation["verdict"]["passed"] and result.observation["finish_reason"] == "submitted"
        state = await env.state()
        assert state["step_count"] == 4 and state["done"] and state["task_id"] == obs["task_id"]

        # a second episode on the same connection starts from the task's own files again
        result = await env.reset()
        assert result.observation["episode_id"] != "first" and result.observation["turn"] == 0
        result = await env.step({"tool": "read_file", "arguments": {"path": "solution.py"}})
        assert "return a - b" in result.observation["text"]
        result = await env.step({"tool": "submit"})
        assert result.done and result.reward == 0.0 and not result.observation["verdict"]["passed"]


async def test_bad_messages_are_errors_naming_what_was_wrong(base_url: str) -> None:
    async with GenericEnvClient(base_url=base_url) as env:
        with pytest.raises(RuntimeError, match="step before reset"):
            await env.step({"tool": "bash", "arguments": {"command": "ls"}})
        with pytest.raises(RuntimeError, match="exactly one of `message`"):
            await env.step({"message": "x", "tool": "bash"})
        with pytest.raises(RuntimeError, match="no task with id 'nope'"):
            await env.reset(task_id="nope")
        with pytest.raises(RuntimeError, match=r"reset: colour: Extra inputs are not permitted"):
            await env.reset(colour="red")
        result = await env.reset(seed=3)  # the connection is still good
        assert not result.done


async def test_session_limit(base_url: str) -> None:
    async with GenericEnvClient(base_url=base_url) as one, GenericEnvClient(base_url=base_url) as two:
        await one.reset()
        await two.reset()
        third = GenericEnvClient(base_url=base_url)
        try:
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                await third.reset()
        finally:
            await third.close()
        async with httpx.AsyncClient(base_url=base_url) as http:
            r = await http.post("/reset", json={})
            assert r.status_code == 429 and "capacity" in r.json()["detail"]
    # the slots are free again once the connections end
    async with GenericEnvClient(base_url=base_url) as again:
        assert not (await again.reset()).done


async def test_the_token_is_required(server: Served) -> None:
    with pytest.raises(ConnectionError):
        await GenericEnvClient(base_url=f"{server.url}/oe/wrong-token-0123456789").connect()
    with pytest.raises(ConnectionError):  # no token at all
        await GenericEnvClient(base_url=server.url).connect()
    async with httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.post("/reset", json={})).status_code == 401
        assert (await http.get("/schema")).status_code == 401
        health = (await http.get("/health")).json()
        assert health["status"] == "healthy"
        assert (await http.get("/schema", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200
    assert TOKEN not in "".join(server.log)


async def test_http_routes_and_idle_reaping(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        schema = (await http.get("/schema")).json()
        assert {"action", "observation", "state"} <= schema.keys() and "tool" in schema["action"][
            "properties"
        ]
        reset = (await http.post("/reset", json={"seed": 0})).json()
        episode = reset["observation"]["episode_id"]
        step = {
            "episode_id": episode,
            "action": {"tool": "write_file", "arguments": {"path": "solution.py", "content": FIXED}},
        }
        assert not (await http.post("/step", json=step)).json()["done"]
        step = {"episode_id": episode, "action": {"tool": "submit"}}
        end = (await http.post("/step", json=step)).json()
        assert end["done"] and end["reward"] >= 1.0 and end["observation"]["verdict"]["passed"]
        state = (await http.get("/state", params={"episode_id": episode})).json()
        assert state["done"] and state["step_count"] == 2
        reaped = (await http.get("/health")).json()["reaped"]

        async with GenericEnvClient(base_url=base_url) as idle:
            await idle.reset()
            await asyncio.sleep(IDLE_S * 2.5)  # the reaper looks every IDLE_S / 4 s
            # the server said why and closed the connection: the client hears one or the other
            with pytest.raises((RuntimeError, ConnectionClosed)) as raised:
                await idle.step({"tool": "bash", "arguments": {"command": "ls"}})
            if isinstance(raised.value, RuntimeError):
                assert "session closed after 2 s idle" in str(raised.value)
        after = await http.get("/state", params={"episode_id": episode})
        assert after.status_code == 404 and "reaped" in after.json()["detail"]
        assert (await http.get("/health")).json()["reaped"] >= reaped + 2  # the HTTP one and the WebSocket


def test_serve_refuses_bad_input_with_a_clear_message(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trialground.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["env", "serve", "codegen", "--token-file", str(tmp_path / "none")])
    assert r.exit_code == 2 and "--token-file" in r.stderr
    (tmp_path / "token").write_text(TOKEN)
    token = ["--token-file", str(tmp_path / "token")]
    r = runner.invoke(app, ["env", "serve", "no-such-source", *token])
    assert r.exit_code == 2 and "unknown task source 'no-such-source'" in r.stderr
    r = runner.invoke(app, ["env", "serve", "codegen", *token, "--tool-format", "yaml"])
    assert r.exit_code == 2 and "--tool-format" in r.stderr
    r = runner.invoke(app, ["env", "serve", "codegen", *token, "--port", "70000"])
    assert r.exit_code == 2 and "--port" in r.stderr
