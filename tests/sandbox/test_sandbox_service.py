"""The sandbox service over real HTTP on loopback, and the remote backend as its client."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from trialground.errors import SandboxError
from trialground.sandbox.base import ExecStatus, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.service.app import create_app, uvicorn_config
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.code_tests import CodeTestsVerifier

TOKEN = "t0ken-for-tests-0123456789"


@dataclass
class Server:
    url: str
    app: object
    token_file: Path

    def config(self, **kw: object) -> SandboxConfig:
        return SandboxConfig(backend="remote", remote_url=self.url, token_file=str(self.token_file), **kw)  # type: ignore[arg-type]


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    # idle_s (the param, 0.6 s by default) reaps a session whose client went quiet; a test that holds
    # sessions across several calls asks for more, so a busy machine's pauses do not reap them
    idle_s = float(getattr(request, "param", 0.6))
    app = create_app(TOKEN, max_sessions=3, idle_s=idle_s, max_concurrent_execs=2)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn_config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    try:
        yield Server(f"http://127.0.0.1:{port}", app, token_file)
    finally:
        uv.should_exit = True
        thread.join(timeout=20)
        sock.close()


async def test_wrong_or_missing_token_is_401_and_nothing_runs(server: Server, tmp_path: Path) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            r = await client.post("/sessions", json={}, headers=headers)
            assert r.status_code == 401
            r = await client.post(
                "/sessions/x/exec", json={"cmd": ["touch", "/workspace/x"]}, headers=headers
            )
            assert r.status_code == 401
        health = (await client.get("/health")).json()
        assert health["sessions"] == 0
    bad = tmp_path / "bad"
    bad.write_text("nope")
    with pytest.raises(SandboxError, match="401"):
        await open_sandbox(SandboxConfig(backend="remote", remote_url=server.url, token_file=str(bad)))


async def test_remote_sandbox_full_interface(server: Server) -> None:
    async with await open_sandbox(server.config(), {"a.txt": "A"}) as sb:
        r = await sb.exec("cat a.txt; cat", stdin=b"\xffin")
        assert r.status is ExecStatus.OK and r.stdout == "A\ufffdin"
        await sb.write("b.bin", b"\x00\x01")
        assert await sb.read("b.bin") == b"\x00\x01"
        assert await sb.read("b.bin", limit=2) == b"\x00\x01"
        with pytest.raises(SandboxError) as over:  # refused by its size, not read and cut
            await sb.read("b.bin", limit=1)
        assert over.value.kind == "too_large"
        with pytest.raises(FileNotFoundError):
            await sb.read("missing")
        sid = await sb.snapshot()
        await sb.exec("rm a.txt")
        await sb.restore(sid)
        child = await sb.fork()
        try:
            assert (await child.exec(["cat", "a.txt"])).stdout == "A"
        finally:
            await child.close()


@pytest.mark.parametrize("server", [120.0], indirect=True)
async def test_concurrent_sessions_and_session_limit(server: Server) -> None:
    boxes = await asyncio.gather(*(open_sandbox(server.config()) for _ in range(3)))
    try:
        results = await asyncio.gather(*(b.exec(f"sleep 0.2; echo {i}") for i, b in enumerate(boxes)))
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
        with pytest.raises(SandboxError, match="429"):
            await open_sandbox(server.config())
    finally:
        await asyncio.gather(*(b.close() for b in boxes))
    async with await open_sandbox(server.config()) as again:  # capacity is back once they close
        assert (await again.exec(["true"])).ok


async def test_vanished_client_is_reaped(server: Server) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
        sid = (await client.post("/sessions", json={})).json()["session_id"]
        assert (await client.get("/health")).json()["sessions"] == 1
    # The client is gone without closing its session; the reaper frees it.
    await asyncio.sleep(1.2)
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
        health = (await client.get("/health")).json()
        assert health["sessions"] == 0 and health["reaped"] == 1
        assert (await client.post(f"/sessions/{sid}/exec", json={"cmd": ["true"]})).status_code == 404


async def test_network_refused_unless_server_allows(server: Server) -> None:
    with pytest.raises(SandboxError, match="403"):
        await open_sandbox(server.config(network=True))


PROBE = Task(
    domain="code",
    prompt="probe",
    hidden_checks={
        "test_hidden.py": "from solution import probe\n\n\ndef test_clean():\n    assert probe() == 0\n"
    },
    verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
)
# Fails, and leaves a file in the workspace, /tmp and /dev/shm of the sandbox it ran in.
PLANT = (
    "for _p in ('/tmp/planted', '/dev/shm/planted', 'planted.txt'):\n"
    "    open(_p, 'w').write('x')\n"
    "def probe():\n    return 1\n"
)
# Passes only in a sandbox that holds none of those files.
CHECK = (
    "import os\n"
    "def probe():\n"
    "    return sum(os.path.exists(p) for p in ('/tmp/planted', '/dev/shm/planted', 'planted.txt'))\n"
)


@pytest.mark.parametrize("server", [30.0], indirect=True)
@pytest.mark.parametrize("batch", [1, 4], ids=["single", "batched"])
async def test_grading_through_the_service_reuses_a_session_and_restores_it_clean(
    server: Server, batch: int
) -> None:
    """The service's sessions are bubblewrap sandboxes: graders reuse them (restored, /tmp and /dev/shm
    emptied) and batch single-turn gradings into one exec, as they do locally."""
    table = server.app.state.table  # type: ignore[attr-defined]
    opened: list[str] = []
    add = table.add
    table.add = lambda sandbox: opened.append(add(sandbox)) or opened[-1]
    verifier = CodeTestsVerifier(
        server.config(), GradingConfig(reuse_sandboxes=1, max_parallel=1, max_batch=batch)
    )
    try:
        for _ in range(2):
            if batch == 1:
                planted = await verifier.verify(PROBE, PLANT)
                checks = [await verifier.verify(PROBE, CHECK) for _ in range(2)]
            else:
                planted, *checks = await verifier.verify_many(
                    [(PROBE, PLANT), (PROBE, CHECK), (PROBE, CHECK)]
                )
            assert not planted.passed and planted.error is None  # type: ignore[union-attr]
            assert all(v.passed for v in checks), [(v.detail, v.tests) for v in checks]  # type: ignore[union-attr]
    finally:
        await verifier.close()
    assert len(opened) == 1  # one session served every grading: reused, not opened per grading


async def test_a_hand_over_through_the_service_gives_new_namespaces(server: Server) -> None:
    """`hand_over` of a remote sandbox reaches the service's sandbox: the next pid starts afresh there
    (a restore keeps it: one occupant could set it for the next)."""
    pid = ["python3", "-c", "import os; print(os.getpid())"]
    async with await open_sandbox(server.config()) as sb:
        sid = await sb.snapshot()
        await sb.exec("for i in $(seq 60); do /bin/true; done")
        await sb.restore(sid)
        kept = int((await sb.exec(pid)).stdout)
        await sb.hand_over(sid)
        fresh = int((await sb.exec(pid)).stdout)
    assert kept > 60 > fresh, (kept, fresh)


async def test_a_too_deep_or_too_long_json_body_is_a_400_not_a_500(server: Server) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    bodies = {
        "nested": "[" * 200_000 + "]" * 200_000,
        "digits": '{"cmd": ["true"], "timeout_s": ' + "9" * 5000 + "}",
    }
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
        for expected, body in bodies.items():
            for path in ("/sessions", "/sessions/x/exec"):
                r = await client.post(path, content=body)
                assert r.status_code == 400, (path, r.status_code, r.text[:300])
                assert expected in r.text
