"""The sandbox service: the `Sandbox` interface over HTTP, for sandbox fleets on CPU machines.

Every route but `/health` needs `Authorization: Bearer <token>`: without it the answer is 401 before any
of the request body is read, and nothing runs. Bodies are capped (`max_body_bytes`, 413 beyond) and must
arrive within `body_timeout_s`, request headers within `header_timeout_s` (`http_guard.py`). Each session
is one sandbox on this machine (always the bwrap backend); at most `max_sessions` exist at once (429
beyond), at most `max_concurrent_execs` commands run at once (the rest queue), and a session unused for
`idle_s` seconds is closed, so clients that vanish never exhaust capacity. Bytes travel base64-encoded
(strict: anything but the standard alphabet with padding is a 400). Every bad input gets a 4xx whose
`detail` says what was wrong: 400 (bad base64, a bad path, a path that is not a regular file), 404 (an
unknown session, its kind `closed` in `X-Sandbox-Error-Kind`; a missing file), 408, 413, 422 (JSON that
does not fit the route's schema, with each field's error). `remote.py` is the client.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from trialground.errors import SandboxError
from trialground.ports import listen
from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.beneath import read_limit
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.service.http_guard import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    GuardMiddleware,
    GuardSettings,
    timed_protocol,
)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL byte")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]  # strings that reach argv, environ or paths


class SessionSpec(BaseModel):
    """What a client may choose about its sandbox (the backend and host paths are the server's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limits: Limits = Field(default_factory=Limits)
    network: bool = False
    snapshot_mode: str = "auto"
    warm: bool = True
    python_fast: bool = True
    files: dict[Text, str] = Field(default_factory=dict, description="path -> base64 content")


class ExecRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cmd: list[Text] | Text
    stdin_b64: str | None = None
    env: dict[Text, Text] | None = None
    cwd: Text | None = None
    limits: Limits | None = None


class FileWrite(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Text
    data_b64: str


class RestoreRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    snapshot_id: str
    # for a new occupant (`Sandbox.hand_over`): new namespaces and workspace file system, not a reset
    hand_over: bool = False


@dataclass
class Session:
    sandbox: Sandbox
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class SessionTable:
    """The live sessions, their cap, and the reaper."""

    def __init__(self, max_sessions: int, idle_s: float, allow_network: bool) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.allow_network = allow_network
        self.sessions: dict[str, Session] = {}
        self.reaped = 0
        self._opening = 0

    def reserve(self) -> None:
        if len(self.sessions) + self._opening >= self.max_sessions:
            raise HTTPException(429, f"session limit reached ({self.max_sessions})")
        self._opening += 1

    def add(self, sandbox: Sandbox) -> str:
        self._opening -= 1
        sid = uuid.uuid4().hex
        self.sessions[sid] = Session(sandbox)
        return sid

    @contextlib.asynccontextmanager
    async def use(self, sid: str) -> AsyncIterator[Sandbox]:
        session = self.sessions.get(sid)
        if session is None:
            raise _no_session()
        session.busy += 1
        try:
            yield session.sandbox
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()

    async def close(self, sid: str) -> bool:
        session = self.sessions.pop(sid, None)
        if session is not None:
            await session.sandbox.close()
        return session is not None

    async def reap(self) -> None:
        now = time.monotonic()
        idle = [s for s, v in self.sessions.items() if not v.busy and now - v.last_used > self.idle_s]
        for sid in idle:
            self.reaped += 1
            await self.close(sid)

    async def close_all(self) -> None:
        for sid in list(self.sessions):
            await self.close(sid)


KIND_HEADER = "X-Sandbox-Error-Kind"
"""A file route's 400 names the `SandboxError` kind here (bad_path, not_a_file, too_large, ...)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(value: str, where: str) -> bytes:
    """Strict base64 (standard alphabet, padded); a 400 naming `where` otherwise."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HTTPException(400, f"{where}: not valid base64 ({exc})") from None


_CLIENT_ERRORS = frozenset(
    {"bad_path", "bad_snapshot", "bad_command", "read", "write", "not_a_file", "too_large"}
)


def _no_session() -> HTTPException:
    """404 for a session that does not exist (never made, closed, reaped, or lost with an earlier server
    process), its kind `closed` named in `KIND_HEADER`, so a client tells it from a missing file."""
    return HTTPException(404, "no such session (closed or reaped)", headers={KIND_HEADER: "closed"})


def _sandbox_failed(exc: SandboxError, what: str) -> HTTPException:
    """The HTTP answer to a SandboxError: the client's fault (400) or the server's (500)."""
    if exc.kind == "closed":
        return _no_session()
    if exc.kind in _CLIENT_ERRORS:
        return HTTPException(400, str(exc), headers={KIND_HEADER: exc.kind})
    return HTTPException(500, f"{what} failed: {exc}", headers={KIND_HEADER: exc.kind})


def _file_error(exc: OSError, path: str) -> HTTPException:
    if isinstance(exc, FileNotFoundError):
        return HTTPException(404, f"{path}: no such file")
    return HTTPException(400, f"{path}: {exc.strerror or exc}")


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class Reapable(Protocol):
    async def reap(self) -> object: ...
    async def close_all(self) -> object: ...


def reaping_lifespan(
    table: Reapable, idle_s: float, on_close: Callable[[], Awaitable[object]] | None = None
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """An app lifespan that reaps the table's idle sessions every `idle_s / 4` (at most 5 s) while the app
    runs, then closes every session (and calls `on_close`) when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(min(idle_s / 4, 5.0))
                await table.reap()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await table.close_all()
            if on_close is not None:
                await on_close()

    return lifespan


def create_app(
    token: str, *, max_sessions: int = 32, idle_s: float = 300.0, max_concurrent_execs: int | None = None,
    allow_network: bool = False, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
) -> FastAPI:  # fmt: skip
    """The service as an ASGI app. `token` is the shared secret clients must present.

    Header timeouts belong to the HTTP protocol, not the app: serve it with `uvicorn_config` (or give
    uvicorn `http=timed_protocol(...)` yourself).
    """
    table = SessionTable(max_sessions, idle_s, allow_network)
    execs = asyncio.Semaphore(max_concurrent_execs or max(2, (os.cpu_count() or 2) * 2))

    app = FastAPI(title="trialground sandbox service", lifespan=reaping_lifespan(table, idle_s))
    app.state.table = table
    app.state.execs = execs  # shared with routes added to the app later (integrations.sandbox_fusion)
    # The token check, body cap and body deadline run before FastAPI reads a byte of the body.
    guard = GuardSettings(token, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    app.add_middleware(GuardMiddleware, settings=guard)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=422)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "sessions": len(table.sessions), "reaped": table.reaped}

    @app.post("/sessions")
    async def create(spec: SessionSpec) -> dict[str, str]:
        if spec.network and not table.allow_network:
            raise HTTPException(403, "this server does not give sandboxes a network")
        if spec.snapshot_mode not in ("auto", "overlay", "copy"):
            raise HTTPException(422, "snapshot_mode must be auto, overlay or copy")
        config = SandboxConfig(
            limits=spec.limits, network=spec.network, snapshot_mode=spec.snapshot_mode,  # type: ignore[arg-type]
            warm=spec.warm, python_fast=spec.python_fast,
        )  # fmt: skip
        files = {p: _unb64(d, f"files[{p!r}]") for p, d in spec.files.items()}
        table.reserve()
        try:
            sandbox = await open_sandbox(config, files)
        except SandboxError as exc:
            table._opening -= 1
            raise _sandbox_failed(exc, "sandbox") from exc
        except OSError as exc:  # a file of `files` that cannot be written where it names
            table._opening -= 1
            raise HTTPException(400, f"files: {exc.strerror or exc}") from exc
        except BaseException:
            table._opening -= 1
            raise
        return {"session_id": table.add(sandbox)}

    @app.post("/sessions/{sid}/exec")
    async def execute(sid: str, req: ExecRequest) -> dict[str, Any]:
        stdin = _unb64(req.stdin_b64, "stdin_b64") if req.stdin_b64 is not None else None
        async with table.use(sid) as sandbox, execs:
            try:
                result = await sandbox.exec(req.cmd, stdin=stdin, env=req.env, cwd=req.cwd, limits=req.limits)
            except SandboxError as exc:
                raise _sandbox_failed(exc, "exec") from exc
            return result.model_dump(mode="json")

    @app.put("/sessions/{sid}/files")
    async def write(sid: str, req: FileWrite) -> dict[str, bool]:
        data = _unb64(req.data_b64, "data_b64")
        async with table.use(sid) as sandbox:
            try:
                await sandbox.write(req.path, data)
            except SandboxError as exc:
                raise _sandbox_failed(exc, "write") from exc
            except OSError as exc:
                raise _file_error(exc, req.path) from exc
            return {"ok": True}

    @app.get("/sessions/{sid}/files")
    async def read(sid: str, path: str, limit: int | None = None) -> dict[str, str]:
        _no_nul_query(path)
        async with table.use(sid) as sandbox:
            try:
                return {"data_b64": _b64(await sandbox.read(path, read_limit(limit)))}
            except SandboxError as exc:
                raise _sandbox_failed(exc, "read") from exc
            except OSError as exc:
                raise _file_error(exc, path) from exc

    @app.post("/sessions/{sid}/snapshot")
    async def snapshot(sid: str) -> dict[str, str]:
        async with table.use(sid) as sandbox:
            try:
                return {"snapshot_id": await sandbox.snapshot()}
            except SandboxError as exc:
                raise _sandbox_failed(exc, "snapshot") from exc

    @app.post("/sessions/{sid}/restore")
    async def restore(sid: str, req: RestoreRequest) -> dict[str, bool]:
        async with table.use(sid) as sandbox:
            try:
                await (sandbox.hand_over if req.hand_over else sandbox.restore)(req.snapshot_id)
            except SandboxError as exc:
                raise _sandbox_failed(exc, "restore") from exc
            return {"ok": True}

    @app.post("/sessions/{sid}/fork")
    async def fork(sid: str) -> dict[str, str]:
        table.reserve()
        try:
            async with table.use(sid) as sandbox:
                child = await sandbox.fork()
        except SandboxError as exc:
            table._opening -= 1
            raise _sandbox_failed(exc, "fork") from exc
        except BaseException:
            table._opening -= 1
            raise
        return {"session_id": table.add(child)}

    @app.delete("/sessions/{sid}")
    async def close(sid: str) -> dict[str, bool]:
        if not await table.close(sid):
            raise _no_session()
        return {"ok": True}

    return app


def _no_nul_query(path: str) -> None:
    if "\x00" in path:
        raise HTTPException(400, "path: must not contain a NUL byte")


def uvicorn_config(app: FastAPI, *, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S, **kwargs: Any) -> Any:
    """A `uvicorn.Config` for the service: uvicorn's h11 protocol with the header deadline."""
    import uvicorn

    if header_timeout_s <= 0:
        raise ValueError("header_timeout_s must be > 0")
    kwargs.setdefault("timeout_keep_alive", 5)
    return uvicorn.Config(app, http=timed_protocol(header_timeout_s), **kwargs)


def serve_forever(
    *, host: str, port: int, token: str, max_sessions: int, idle_s: float,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S, extend: Callable[[FastAPI], None] | None = None,
    sock: socket.socket | None = None,
) -> None:  # fmt: skip
    """Serve the app until interrupted; `extend(app)` adds further routes first (the CLI's SandboxFusion
    API). `sock`: a socket already listening on host:port (else one is opened here)."""
    import uvicorn

    app = create_app(
        token, max_sessions=max_sessions, idle_s=idle_s, max_body_bytes=max_body_bytes,
        body_timeout_s=body_timeout_s,
    )  # fmt: skip
    if extend is not None:
        extend(app)
    if sock is None:
        sock = listen(host, port)
    print(
        f"trialground sandbox service: listening on http://{_url_host(host)}:{sock.getsockname()[1]}",
        flush=True,
    )
    config = uvicorn_config(app, header_timeout_s=header_timeout_s, log_level="info")
    uvicorn.Server(config).run(sockets=[sock])


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
