"""The gateway's HTTP routes (FastAPI): OpenAI's `/v1/chat/completions`, `/v1/completions`,
`/v1/responses` (`responses.py`), `/v1/models`, under `/s/{session}/v1/...` (an episode's base URL) and
`/v1/...` (the session found by its key alone).

Every route but `/health` needs `Authorization: Bearer KEY`, compared in constant time with the key of the
session it names; a wrong or missing key is 401 before the body is read. A request that arrives on a
session's own listener (`listeners.py`) opens that session only. A session with a budget admits its
requests before their bodies are read (`Session.request`: 429 when spent or too many in flight) and
bounds their size (`SessionBudget.body_bytes`). Bodies over 64 MiB (or the session's bound) are 413. A
body that is not JSON, or does not fit the route, is a 400 naming each field; errors have OpenAI's shape
(`{"error": {"message", "type", "code"}}`, plus vLLM's top-level `message`), so the `openai` SDK raises
its own exception classes for them. The body is parsed by `plainjson.loads`: nested more than 64 levels
or with a number of more than 400 digits it is a 400 that says so, never a 500.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from trialground import plainjson
from trialground.gateway import responses, sse
from trialground.gateway.api import ChatRequest, CompletionRequest
from trialground.gateway.session import GatewayError, Session, describe
from trialground.gateway.streaming import chat_chunks, completion_chunks

MAX_BODY_BYTES = 64 * 1024 * 1024
LISTENER_SESSION = "trialground_session"  # the ASGI state key naming the session a listener serves
M = TypeVar("M", bound=BaseModel)


@dataclass
class Sessions:
    """Open sessions by id, each with its key."""

    by_id: dict[str, tuple[str, Session]] = field(default_factory=dict)

    def open(self, session: Session, *, sid: str | None = None, key: str | None = None) -> tuple[str, str]:
        sid = sid or secrets.token_hex(8)
        key = key or f"tg-{secrets.token_urlsafe(32)}"
        self.by_id[sid] = (key, session)
        return sid, key

    def close(self, sid: str) -> Session | None:
        entry = self.by_id.pop(sid, None)
        return entry[1] if entry else None

    def find(self, sid: str | None, key: str, *, bound: str | None = None) -> Session:
        """The session `key` opens: the one `sid` names, or (no `sid`) the one whose key it is. On a
        session's own listener (`bound`), only that session."""
        if bound is not None:
            if sid is not None and sid != bound:
                raise GatewayError("this address serves another session", status=401, code="invalid_api_key")
            sid = bound
        if sid is not None:
            entry = self.by_id.get(sid)
            if entry is not None and hmac.compare_digest(entry[0].encode(), key.encode()):
                return entry[1]
            raise GatewayError("invalid API key for this base URL", status=401, code="invalid_api_key")
        for stored, session in list(self.by_id.values()):
            if hmac.compare_digest(stored.encode(), key.encode()):
                return session
        raise GatewayError("invalid API key", status=401, code="invalid_api_key")


def error_response(exc: GatewayError) -> JSONResponse:
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    if exc.status == 401:
        kind = "authentication_error"
    body = {
        "object": "error",
        "message": str(exc),
        "type": kind,
        "code": exc.status,
        "error": {"message": str(exc), "type": kind, "code": exc.code, "param": None},
    }
    return JSONResponse(body, status_code=exc.status)


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise GatewayError("missing API key (Authorization: Bearer KEY)", status=401, code="invalid_api_key")
    return value.strip()


async def read_json(request: Request, limit: int | None = None) -> Any:
    most = min(limit or MAX_BODY_BYTES, MAX_BODY_BYTES)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > most:
        raise GatewayError(f"body: over {most} bytes", status=413, code="body_too_large")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > most:
            raise GatewayError(f"body: over {most} bytes", status=413, code="body_too_large")
    try:
        # in a worker thread: a large body's scan and parse never hold the event loop other sessions share
        return await asyncio.to_thread(plainjson.loads, bytes(raw), plainjson.REQUEST_BODY) if raw else {}
    except plainjson.UnparsableJSON as exc:
        raise GatewayError(f"body: {exc}") from exc


def parse(model: type[M], body: Any) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise GatewayError(describe(exc)) from exc


Handler = Callable[[Request], Awaitable[Any]]


def guarded(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    """`fn`'s answer as JSON (a `Response`, e.g. a stream, as it is); a `GatewayError` as OpenAI's error."""

    async def route(request: Request) -> Response:
        try:
            answer = await fn(request)
            return answer if isinstance(answer, Response) else JSONResponse(answer)
        except GatewayError as exc:
            return error_response(exc)

    return route


def make_app(
    sessions: Sessions, *, title: str = "trialground gateway", default: Session | None = None
) -> FastAPI:
    """The routes over `sessions`; with `default`, every request is answered by that one session and
    authentication is the caller's (a middleware of the reference server)."""
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None)

    def session_of(request: Request) -> Session:
        if default is not None:
            return default
        key = bearer(request)
        bound = request.scope.get("state", {}).get(LISTENER_SESSION)
        return sessions.find(request.path_params.get("sid"), key, bound=bound)

    async def chat(request: Request) -> Any:
        session = session_of(request)
        async with session.request():
            req = parse(ChatRequest, await read_json(request, session.body_limit))
            reply = await session.chat(req)
        tok = session.generator.tokenizer
        return sse.data_stream(chat_chunks(reply, tok, req)) if req.stream else reply

    async def complete(request: Request) -> Any:
        session = session_of(request)
        async with session.request():
            req = parse(CompletionRequest, await read_json(request, session.body_limit))
            reply = await session.complete(req)
        tok = session.generator.tokenizer
        return sse.data_stream(completion_chunks(reply, tok, req)) if req.stream else reply

    async def respond(request: Request) -> Any:
        session = session_of(request)
        async with session.request():
            req = parse(responses.ResponsesRequest, await read_json(request, session.body_limit))
            try:
                chat_req = responses.to_chat(req)
            except responses.Refused as exc:
                raise GatewayError(str(exc)) from exc
            except ValidationError as exc:
                raise GatewayError(describe(exc)) from exc
            answer = responses.from_chat(await session.chat(chat_req), req)
        tok = session.generator.tokenizer
        return sse.event_stream(responses.events(answer, tok)) if req.stream else answer

    async def models(request: Request) -> Any:
        session = session_of(request)
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "owned_by": "trialground"}
                for name in (session.served_name, *sorted(session.aliases))
            ],
        }

    async def health(_request: Request) -> Any:
        return {}

    app.add_api_route("/health", guarded(health), methods=["GET"])
    for prefix in ("/v1", "/s/{sid}/v1"):
        app.add_api_route(f"{prefix}/chat/completions", guarded(chat), methods=["POST"])
        app.add_api_route(f"{prefix}/completions", guarded(complete), methods=["POST"])
        app.add_api_route(f"{prefix}/responses", guarded(respond), methods=["POST"])
        app.add_api_route(f"{prefix}/models", guarded(models), methods=["GET"])
    return app
