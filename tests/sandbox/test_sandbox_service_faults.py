"""The sandbox service under faults, with the real service in its own process and the remote backend as
its client: a deleted session's capacity is free at once, and a service killed and restarted under a
client gives that client clear errors, never a hang, and serves new sessions again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
TOKEN = "t0ken-for-fault-tests-0123456789"
SERVER = Path(__file__).with_name("service_process.py")
LIMITS = Limits(wall_s=60, cpu_s=60, memory_mb=128, pids=32, disk_mb=16)


@dataclass
class Service:
    proc: subprocess.Popen[str]
    port: int
    token_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> SandboxConfig:
        return SandboxConfig(
            backend="remote", remote_url=self.url, token_file=str(self.token_file), limits=LIMITS
        )


def start(port: int, token_file: Path, max_sessions: int = 2) -> Service:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), TOKEN, str(port), str(max_sessions)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    bound = int(proc.stdout.readline())
    service = Service(proc, bound, token_file)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the socket is bound; wait until it answers
        try:
            if httpx.get(f"{service.url}/health", timeout=2).status_code == 200:
                return service
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError("the sandbox service did not start")


def stop(service: Service) -> None:
    if service.proc.poll() is None:
        service.proc.kill()
    service.proc.wait(timeout=30)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def service(token_file: Path) -> Iterator[Service]:
    svc = start(0, token_file)
    try:
        yield svc
    finally:
        stop(svc)


async def _health(service: Service) -> dict:
    async with httpx.AsyncClient(base_url=service.url, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        return (await c.get("/health")).json()


async def test_a_deleted_session_frees_its_slot_at_once(service: Service) -> None:
    first, second = await open_sandbox(service.config()), await open_sandbox(service.config())
    with pytest.raises(SandboxError, match="429"):
        await open_sandbox(service.config())
    # One session is deleted while a command of it runs, the other idle: both slots are free as soon as
    # each DELETE has been answered, and the running command ends with a clear error.
    running = asyncio.create_task(first.exec(["sleep", "50"]))
    await asyncio.sleep(0.5)
    await first.close()
    await second.close()
    assert (await _health(service))["sessions"] == 0
    again = [await open_sandbox(service.config()), await open_sandbox(service.config())]
    try:
        assert all([(await sb.exec(["true"])).ok for sb in again])
        with pytest.raises(SandboxError, match=r"closed|404"):
            await asyncio.wait_for(running, timeout=30)
    finally:
        for sb in again:
            await sb.close()


async def test_a_restarted_service_gives_its_clients_clear_errors_and_no_hang(
    service: Service, token_file: Path
) -> None:
    sb = await open_sandbox(service.config(), {"a.txt": "A"})
    assert (await sb.exec(["echo", "up"])).stdout == "up\n"
    running = asyncio.create_task(sb.exec(["sleep", "50"]))
    await asyncio.sleep(0.5)
    os.kill(service.proc.pid, signal.SIGKILL)  # the service dies under its client, mid-command
    service.proc.wait(timeout=30)
    with pytest.raises(SandboxError, match="unreachable") as died:
        await asyncio.wait_for(running, timeout=30)  # at once, not after the command's 50 s or a timeout
    assert died.value.kind == "transport"
    with pytest.raises(SandboxError, match="unreachable") as down:
        await asyncio.wait_for(sb.exec(["true"]), timeout=30)  # while it is down: refused, at once
    assert down.value.kind == "transport"

    restarted = start(service.port, token_file)  # the same address again
    try:
        with pytest.raises(SandboxError, match="no such session") as gone:
            await asyncio.wait_for(sb.exec(["true"]), timeout=30)  # its session died with the old process
        assert gone.value.kind == "closed"
        with pytest.raises(SandboxError, match="no such session"):  # not a missing file of a live one
            await asyncio.wait_for(sb.read("a.txt"), timeout=30)
        await asyncio.wait_for(sb.close(), timeout=30)  # closing a session that is gone is no error
        async with await open_sandbox(restarted.config()) as fresh:  # new sessions work again
            assert (await fresh.exec(["echo", "back"])).stdout == "back\n"
    finally:
        stop(restarted)
