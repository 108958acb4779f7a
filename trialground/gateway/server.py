"""The gateway running inside the training process's event loop (uvicorn), on a unix socket and/or a
TCP address.

Episodes in sandboxes reach it through the unix socket only: its directory is shown read-only in every
harness sandbox (`envs.harness.GATEWAY_MOUNT`), and a forwarder inside the sandbox
(`envs/harness_launcher.py`) listens on the sandbox's own loopback and relays each connection to the
socket. The sandbox has no other network: its network namespace holds only loopback, so the gateway is
all it can reach. Sessions are told apart by their base URL (`/s/{id}/v1`) and key; a key opens only
its own session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from trialground.envs.harness import GATEWAY_SOCKET as SOCKET_NAME
from trialground.gateway.app import Sessions, make_app
from trialground.gateway.connections import capped_protocol
from trialground.gateway.session import Session


@dataclass(frozen=True)
class Endpoint:
    """One session's address: `path` is its base path (`/s/{id}/v1`), `key` its API key."""

    sid: str
    key: str
    path: str


class Gateway:
    """`await start()`, then `open(session)` per episode and `close(sid)` after it; `await stop()`."""

    def __init__(self, *, host: str | None = None, port: int = 0, unix: bool = True) -> None:
        self.sessions = Sessions()
        self.host, self.port, self.unix = host, port, unix
        # Made now, so sandboxes configured before `start` can show it; the socket appears at `start`.
        self.socket_dir: Path | None = None
        if unix:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="trialground-gateway-"))
            os.chmod(self.socket_dir, 0o755)  # the sandbox uid traverses it (read-only in the sandbox)
        self._servers: list[uvicorn.Server] = []
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def socket_path(self) -> Path:
        if self.socket_dir is None:
            raise RuntimeError("the gateway has no unix socket (not started, or unix=False)")
        return self.socket_dir / SOCKET_NAME

    @property
    def url(self) -> str:
        if not self._servers or self.host is None:
            raise RuntimeError("the gateway has no TCP listener")
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (idempotent: a started gateway is left as it is)."""
        if self._servers:
            return
        app = make_app(self.sessions)
        configs = []
        if self.unix:
            configs.append(_config(app, uds=str(self.socket_path)))
        if self.host is not None:
            configs.append(_config(app, host=self.host, port=self.port))
        for config in configs:
            server = uvicorn.Server(config)
            task = asyncio.get_running_loop().create_task(server.serve())
            while not server.started:
                if task.done():
                    await task  # raises what stopped it (a port in use)
                    raise RuntimeError("the gateway's server stopped before it started")
                await asyncio.sleep(0.01)
            self._servers.append(server)
            self._tasks.append(task)
            if config.uds is None and server.servers:
                self.port = server.servers[0].sockets[0].getsockname()[1]
        if self.unix:
            os.chmod(self.socket_path, 0o777)  # connecting needs write permission on the socket

    def open(self, session: Session) -> Endpoint:
        sid, key = self.sessions.open(session)
        return Endpoint(sid, key, f"/s/{sid}/v1")

    def close(self, sid: str) -> Session | None:
        return self.sessions.close(sid)

    async def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=10)
        self._servers, self._tasks = [], []
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self.socket_dir = None


def _config(app: Any, **where: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=2,
        http=capped_protocol(),  # bounded descriptors: `connections.py`
        **where,  # type: ignore[arg-type]
    )
