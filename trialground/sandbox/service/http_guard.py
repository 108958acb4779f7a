"""The sandbox service's front door: authentication, body limits and timeouts, before any route runs.

Two pieces, because uvicorn and FastAPI each see only part of a request:

- `GuardMiddleware` (ASGI) sees a request once its headers are complete. It refuses a missing or wrong
  token with 401 before a byte of the body is read, a declared `Content-Length` over the cap with 413 at
  once, and otherwise reads the body itself -- counting (413 as soon as a chunked body passes the cap)
  and against a deadline (408 when the whole body has not arrived `body_timeout_s` after the headers) --
  and only then hands the route the buffered body, once its JSON is within `plainjson.REQUEST_BODY`
  (nesting, number length: 400 otherwise). A route therefore never waits on a slow client and
  never holds more than `max_body_bytes` of anyone's request. Every early refusal closes the connection,
  so a client cannot keep pushing a body nobody reads.
- `TimedH11Protocol` (uvicorn's h11 protocol) closes a connection whose request headers are not complete
  `header_timeout_s` after it opened or after its previous response (slow-loris headers); uvicorn's own
  keep-alive timer stops at the first byte of a next request, so it cannot.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from trialground import plainjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES = 64 << 20
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class GuardSettings:
    """The service's limits on what a client may send and how slowly."""

    token: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    public_paths: frozenset[str] = frozenset({"/health"})

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.header_timeout_s <= 0 or self.body_timeout_s <= 0:
            raise ValueError("max_body_bytes must be >= 1 and both timeouts > 0")


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def _check_json_bounds(body: bytes) -> None:
    """A body too deep or with too long a number is a 400 here, before a route's JSON parser (which would
    raise RecursionError or ValueError: a 500) sees it. A body that is not UTF-8 is left to the route."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        plainjson.check(text, plainjson.REQUEST_BODY)
    except plainjson.UnparsableJSON as exc:
        raise _Refused(400, f"request body: {exc}") from None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


class GuardMiddleware:
    """Wraps the service app: token check, then the capped, deadline-bound body read (module docstring)."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings
        self._token = settings.token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._check_token(scope)
            self._check_declared_length(scope)
            body = await self._read_body(receive)
            _check_json_bounds(body)
        except _Refused as refused:
            await _refuse(send, refused)
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_token(self, scope: Scope) -> None:
        if scope.get("path") in self.settings.public_paths:
            return
        scheme, _, presented = (_header(scope, b"authorization") or b"").partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(presented.strip(), self._token):
            raise _Refused(401, "missing or wrong token", ((b"www-authenticate", b"Bearer"),))

    def _check_declared_length(self, scope: Scope) -> None:
        raw = _header(scope, b"content-length")
        if raw is None:
            return
        try:
            declared = int(raw)
        except ValueError:
            raise _Refused(400, f"Content-Length {raw[:40]!r} is not a number") from None
        if declared > self.settings.max_body_bytes:
            raise _Refused(413, self._too_large(f"declares {declared} bytes"))

    def _too_large(self, what: str) -> str:
        return f"request body {what}; this server accepts at most {self.settings.max_body_bytes} bytes"

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.settings.body_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                raise _Refused(
                    408, f"request body not complete within {self.settings.body_timeout_s:g} s"
                ) from None
            if message["type"] == "http.disconnect":
                raise _Refused(400, "client disconnected before the request body was complete")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_body_bytes:
                raise _Refused(413, self._too_large(f"exceeds the cap after {size} bytes"))
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields the buffered body once, then defers to the real one (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Send, refused: _Refused) -> None:
    body = json.dumps({"detail": refused.message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the unread rest of the body is never read: end the connection
        *refused.headers,
    ]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline on each request's headers (`header_timeout_s`)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the request line and headers are complete
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # the next request's headers get the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if busy or self.transport.is_closing():
            return  # a request is being answered: its body deadline is the middleware's
        self.logger.info("closing a connection whose request headers took over %gs", self.header_timeout_s)
        self.transport.close()


def timed_protocol(header_timeout_s: float) -> type[TimedH11Protocol]:
    """A `TimedH11Protocol` class with this header deadline, for `uvicorn.Config(http=...)`."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {"header_timeout_s": header_timeout_s})
