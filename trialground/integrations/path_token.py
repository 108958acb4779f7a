"""A token in the URL path, for clients that cannot send an `Authorization` header.

SandboxFusion's and OpenEnv's clients take only a base URL. `PathTokenMiddleware` serves
`{prefix}/{token}/<route>` as `/<route>` with `Authorization: Bearer {token}`, so the server's own token
check (the sandbox service's `GuardMiddleware`, `BearerWebSocketGuard` for WebSocket sessions) decides
exactly as for a header. The scope is changed in place, so the access log shows `/<route>` and never the
token. With `routes`, only those routes exist under the prefix (404 otherwise, before any token check).
"""

from __future__ import annotations

import hmac
import json

from trialground.sandbox.service.http_guard import ASGIApp, Receive, Scope, Send


class PathTokenMiddleware:
    """See the module docstring. Handles HTTP and WebSocket scopes."""

    def __init__(self, app: ASGIApp, prefix: str, routes: frozenset[str] | None = None) -> None:
        self.app = app
        self.prefix = prefix.rstrip("/") + "/"
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket") or not path.startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        token, _, rest = path[len(self.prefix) :].partition("/")
        route = "/" + rest
        scope["path"] = route
        scope["raw_path"] = route.encode()
        if self.routes is not None and route not in self.routes:
            await _refuse(
                scope, send, 404, f"no route {self.prefix}TOKEN{route} (here: {sorted(self.routes)})"
            )
            return
        headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"authorization"]
        scope["headers"] = [*headers, (b"authorization", b"Bearer " + token.encode())]
        await self.app(scope, receive, send)


class BearerWebSocketGuard:
    """Refuses a WebSocket handshake (HTTP 403, nothing accepted) without `Authorization: Bearer {token}`;
    HTTP requests pass through (their guard is the sandbox service's `GuardMiddleware`)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and not bearer_matches(scope, self._token):
            await _refuse(scope, send, 403, "missing or wrong token")
            return
        await self.app(scope, receive, send)


def bearer_matches(scope: Scope, token: bytes) -> bool:
    presented = b""
    for key, value in scope.get("headers", ()):
        if key.lower() == b"authorization":
            presented = bytes(value)
    scheme, _, credential = presented.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), token)


async def _refuse(scope: Scope, send: Send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        # Closing before accepting: the server answers the handshake with 403.
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
