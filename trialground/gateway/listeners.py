"""Each session's own listener: the connections and descriptors one harness program can make the training
process hold are counted per session, not per gateway.

`SessionListener` binds a unix socket (a name no sandbox can list: 128 random bits, in a directory it may
traverse but not read) and/or a TCP port the kernel picks, and serves the gateway's app on it with
uvicorn's h11 protocol (`connections.CappedH11Protocol`) under the session's own bound:

- at most `SessionBudget.connections` connections open at once (counted from their accept, before a
  transport exists); the one past it is closed in the same step it is accepted, before anything is
  read, and ends the episode (`Session.connections_exceeded`). The training process therefore holds at
  most `connections + 1` descriptors for a session (its connections and its listener; a refused one for
  the instant between `accept` and `close`), whatever the program opens; the kernel queues at most
  `BACKLOG` more (its own memory, no descriptor of the process). Another session's connections arrive on
  another listener, never refused for this one's;
- a request on this listener opens this session only (`app.LISTENER_SESSION`), so a key that leaked to
  another program cannot be used to spend this session's budget from its connections either;
- headers not complete 10 s after a connection opened (or after its last response) close it.

`close()` stops listening, aborts every connection still open (their descriptors are released at once)
and removes the socket file. The sockets are bound and listening when the listener is made, so a client
may connect at once. Accepting is the listener's own (`loop.add_reader` and `connect_accepted_socket`),
not `loop.create_server`'s, which makes a transport for up to `backlog` connections per step before any
protocol can count them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from trialground.gateway.app import LISTENER_SESSION
from trialground.gateway.connections import DEFAULT_HEADER_TIMEOUT_S, CappedH11Protocol

BACKLOG = 64  # connections the kernel queues for one session before the loop accepts them


class SessionListener:
    """The listener(s) of session `sid`: `socket_path` (unix) and/or `port` (TCP on `host`)."""

    def __init__(
        self,
        config: uvicorn.Config,
        sid: str,
        *,
        max_connections: int,
        on_refused: Callable[[], None],
        socket_path: str | None = None,
        host: str | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.socket_path, self.host, self.port = socket_path, host, 0
        self.max_connections, self.on_refused = max_connections, on_refused
        self.state = ServerState()
        attrs = {"max_connections": max_connections, "header_timeout_s": DEFAULT_HEADER_TIMEOUT_S}
        self._protocol = type("SessionH11Protocol", (CappedH11Protocol,), attrs)
        self._config, self._app_state = config, {LISTENER_SESSION: sid}
        self._loop = asyncio.get_running_loop()
        self._pending = 0  # accepted sockets whose transport is being made
        self._closed = False
        self._socks: list[socket.socket] = []
        try:
            if socket_path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._socks.append(sock)
                sock.bind(socket_path)
                os.chmod(socket_path, 0o777)  # the sandbox's uid connects to it
            if host is not None:
                sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
                self._socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, 0))
                self.port = sock.getsockname()[1]
            for sock in self._socks:
                sock.listen(BACKLOG)
                sock.setblocking(False)
                self._loop.add_reader(sock.fileno(), self._accept, sock)
        except OSError:
            self.close()
            raise

    @property
    def url(self) -> str | None:
        """The TCP base URL (None without a TCP listener)."""
        return f"http://{self.host}:{self.port}" if self.host is not None else None

    @property
    def held(self) -> int:
        """Connections this listener holds (descriptors of the training process), being made or open."""
        return self._pending + len(self.state.connections)

    def _make(self) -> asyncio.Protocol:
        return self._protocol(config=self._config, server_state=self.state, app_state=self._app_state)

    def _accept(self, sock: socket.socket) -> None:
        """Accept what is queued, at most BACKLOG per step; a connection past the budget is closed at once
        (its descriptor is released before the step ends) and the session told."""
        for _ in range(BACKLOG):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, or the listener closed: try at the next step
                return
            if self._closed or self.held >= self.max_connections:
                conn.close()
                if not self._closed:
                    self.on_refused()
                continue
            conn.setblocking(False)
            self._pending += 1
            made = asyncio.ensure_future(self._loop.connect_accepted_socket(self._make, conn))
            made.add_done_callback(functools.partial(self._made, conn))

    def _made(self, conn: socket.socket, future: asyncio.Future[Any]) -> None:
        self._pending -= 1
        if future.cancelled() or future.exception() is not None:
            conn.close()
        elif self._closed:
            future.result()[0].abort()

    def close(self) -> None:
        """Stop listening and drop every connection (idempotent)."""
        self._closed = True
        for sock in self._socks:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(sock.fileno())
            sock.close()
        self._socks = []
        for connection in list(self.state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        if self.socket_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
