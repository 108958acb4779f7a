"""How many connections the gateway holds, and for how long: every connection is a descriptor of the
training process, and the programs behind the gateway may open as many as they like.

`capped_protocol(max_connections, header_timeout_s)` is uvicorn's h11 protocol with two bounds:

- a connection whose request headers are not complete `header_timeout_s` after it opened (or after its
  previous response) is closed (`sandbox.service.http_guard.TimedH11Protocol`), so an idle or slow
  connection is not held;
- a connection that arrives while the listener already holds `max_connections` is closed at once, before
  anything is read: the gateway's descriptors stay at most `max_connections` per listener whatever a
  program opens (a program that opens more sees its extra connections closed; the `openai` SDK retries).
"""

from __future__ import annotations

import asyncio

from trialground.sandbox.service.http_guard import TimedH11Protocol

DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_HEADER_TIMEOUT_S = 10.0


class CappedH11Protocol(TimedH11Protocol):
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    _refused: bool = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            self._refused = True
            transport.abort()  # the descriptor is released now, nothing read or answered
            return
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def eof_received(self) -> None:
        if not self._refused:
            super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._refused:
            super().connection_lost(exc)


def capped_protocol(
    max_connections: int = DEFAULT_MAX_CONNECTIONS, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
) -> type[CappedH11Protocol]:
    """A `CappedH11Protocol` class with these bounds, for `uvicorn.Config(http=...)`."""
    if max_connections < 1 or header_timeout_s <= 0:
        raise ValueError("max_connections must be >= 1 and header_timeout_s > 0")
    attrs = {"max_connections": max_connections, "header_timeout_s": header_timeout_s}
    return type("CappedH11Protocol", (CappedH11Protocol,), attrs)
