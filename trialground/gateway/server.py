"""The gateway running inside the training process's event loop (uvicorn): every session on its own
listener (`listeners.py`), a unix socket and/or a TCP port the kernel picks, and optionally one shared TCP
address (`host`) for trusted local clients.

Episodes in sandboxes reach their own session's unix socket only: the socket directory is shown read-only
in every harness sandbox (`envs.harness.GATEWAY_MOUNT`) with permission to traverse it but not to list it,
and each socket's name holds 128 random bits that only its episode's launcher is given. A forwarder inside
the sandbox (`envs/harness_launcher.py`) listens on the sandbox's own loopback and relays each connection
to that socket. The sandbox has no other network: its network namespace holds only loopback. Sessions are
told apart by their base URL (`/s/{id}/v1`) and key; a key opens only its own session, and a session's
listener opens only that session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from trialground.gateway.app import Sessions, make_app
from trialground.gateway.connections import DEFAULT_MAX_CONNECTIONS, capped_protocol
from trialground.gateway.listeners import SessionListener
from trialground.gateway.session import Session


@dataclass(frozen=True)
class Endpoint:
    """One session's address: `path` is its base path (`/s/{id}/v1`), `key` its API key; `socket` the name
    of its own unix socket in the socket directory, `url` its own TCP listener (None where the gateway
    has none, or was not started when the session opened)."""

    sid: str
    key: str
    path: str
    socket: str | None = None
    url: str | None = None


class Gateway:
    """`await start()`, then `open(session)` per episode and `close(sid)` after it; `await stop()`."""

    def __init__(self, *, host: str | None = None, port: int = 0, unix: bool = True) -> None:
        self.sessions = Sessions()
        self.host, self.port, self.unix = host, port, unix
        # Made now, so sandboxes configured before `start` can show it; the socket appears at `start`.
        self.socket_dir: Path | None = None
        if unix:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="trialground-gateway-"))
            # the sandbox uid traverses it to a socket whose name it was given, and cannot list it
            os.chmod(self.socket_dir, 0o711)
        self._servers: list[uvicorn.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._config: uvicorn.Config | None = None
        self._listeners: dict[str, SessionListener] = {}

    def socket_of(self, endpoint: Endpoint) -> Path:
        """The host path of `endpoint`'s own unix socket."""
        if self.socket_dir is None or endpoint.socket is None:
            raise RuntimeError("this session has no unix socket (unix=False, or opened before start)")
        return self.socket_dir / endpoint.socket

    @property
    def url(self) -> str:
        if not self._servers or self.host is None:
            raise RuntimeError("the gateway has no TCP listener")
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (idempotent: a started gateway is left as it is)."""
        if self._config is not None:
            return
        app = make_app(self.sessions)
        self._config = _config(app)
        self._config.load()
        configs = []
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
            if server.servers:
                self.port = server.servers[0].sockets[0].getsockname()[1]

    def open(self, session: Session) -> Endpoint:
        """Open `session`: its key, and (once started) its own listener bounded by its budget."""
        sid, key = self.sessions.open(session)
        if self._config is None:
            return Endpoint(sid, key, f"/s/{sid}/v1")
        name = f"{secrets.token_hex(16)}.sock" if self.socket_dir is not None else None
        budget = session.budget
        try:
            listener = SessionListener(
                self._config,
                sid,
                max_connections=budget.connections if budget is not None else DEFAULT_MAX_CONNECTIONS,
                on_refused=session.connections_exceeded,
                socket_path=str(self.socket_dir / name) if self.socket_dir is not None and name else None,
                host=self.host,
            )
        except BaseException:
            self.sessions.close(sid)
            raise
        self._listeners[sid] = listener
        return Endpoint(sid, key, f"/s/{sid}/v1", socket=name, url=listener.url)

    def close(self, sid: str) -> Session | None:
        listener = self._listeners.pop(sid, None)
        if listener is not None:
            listener.close()
        return self.sessions.close(sid)

    async def stop(self) -> None:
        for sid in list(self._listeners):
            self.close(sid)
        self._config = None
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
    """uvicorn's settings for `app` (`where`: the shared listener's address; none for session listeners)."""
    return uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=2,
        http=capped_protocol(),  # bounded descriptors: `connections.py`
        **where,  # type: ignore[arg-type]
    )
