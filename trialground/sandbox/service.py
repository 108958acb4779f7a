"""The sandbox service: the `Sandbox` interface over HTTP, for sandbox fleets on CPU machines.

Every route but `/health` needs `Authorization: Bearer <token>` (else 401 and nothing runs). Each session
is one sandbox on this machine (always the bwrap backend); at most `max_sessions` exist at once (429
beyond), at most `max_concurrent_execs` commands run at once (the rest queue), and a session unused for
`idle_s` seconds is closed, so clients that vanish never exhaust capacity. Bytes travel base64-encoded.
`remote.py` is the client.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from trialground.errors import SandboxError
from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox


class SessionSpec(BaseModel):
    """What a client may choose about its sandbox (the backend and host paths are the server's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limits: Limits = Field(default_factory=Limits)
    network: bool = False
    snapshot_mode: str = "auto"
    warm: bool = True
    python_fast: bool = True
    files: dict[str, str] = Field(default_factory=dict, description="path -> base64 content")


class ExecRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cmd: list[str] | str
    stdin_b64: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    limits: Limits | None = None


class FileWrite(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    data_b64: str


class RestoreRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    snapshot_id: str


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
            raise HTTPException(404, "no such session (closed or reaped)")
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


def create_app(
    token: str, *, max_sessions: int = 32, idle_s: float = 300.0, max_concurrent_execs: int | None = None,
    allow_network: bool = False,
) -> FastAPI:  # fmt: skip
    """The service as an ASGI app. `token` is the shared secret clients must present."""
    table = SessionTable(max_sessions, idle_s, allow_network)
    execs = asyncio.Semaphore(max_concurrent_execs or max(2, (os.cpu_count() or 2) * 2))

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

    app = FastAPI(title="trialground sandbox service", lifespan=lifespan)
    app.state.table = table

    def authorized(authorization: Annotated[str | None, Header()] = None) -> None:
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(presented.encode(), token.encode()):
            raise HTTPException(401, "missing or wrong token", headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(authorized)]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "sessions": len(table.sessions), "reaped": table.reaped}

    @app.post("/sessions", dependencies=auth)
    async def create(spec: SessionSpec) -> dict[str, str]:
        if spec.network and not table.allow_network:
            raise HTTPException(403, "this server does not give sandboxes a network")
        if spec.snapshot_mode not in ("auto", "overlay", "copy"):
            raise HTTPException(422, "snapshot_mode must be auto, overlay or copy")
        config = SandboxConfig(
            limits=spec.limits, network=spec.network, snapshot_mode=spec.snapshot_mode,  # type: ignore[arg-type]
            warm=spec.warm, python_fast=spec.python_fast,
        )  # fmt: skip
        files = {p: base64.b64decode(d) for p, d in spec.files.items()}
        table.reserve()
        try:
            sandbox = await open_sandbox(config, files)
        except SandboxError as exc:
            table._opening -= 1
            raise HTTPException(500, f"sandbox failed: {exc}") from exc
        except BaseException:
            table._opening -= 1
            raise
        return {"session_id": table.add(sandbox)}

    @app.post("/sessions/{sid}/exec", dependencies=auth)
    async def execute(sid: str, req: ExecRequest) -> dict[str, Any]:
        async with table.use(sid) as sandbox, execs:
            stdin = base64.b64decode(req.stdin_b64) if req.stdin_b64 is not None else None
            result = await sandbox.exec(req.cmd, stdin=stdin, env=req.env, cwd=req.cwd, limits=req.limits)
            return result.model_dump(mode="json")

    @app.put("/sessions/{sid}/files", dependencies=auth)
    async def write(sid: str, req: FileWrite) -> dict[str, bool]:
        async with table.use(sid) as sandbox:
            try:
                await sandbox.write(req.path, base64.b64decode(req.data_b64))
            except SandboxError as exc:
                raise HTTPException(400, str(exc), headers={KIND_HEADER: exc.kind}) from exc
            return {"ok": True}

    @app.get("/sessions/{sid}/files", dependencies=auth)
    async def read(sid: str, path: str) -> dict[str, str]:
        async with table.use(sid) as sandbox:
            try:
                return {"data_b64": _b64(await sandbox.read(path))}
            except FileNotFoundError as exc:
                raise HTTPException(404, f"{path}: no such file") from exc
            except SandboxError as exc:
                raise HTTPException(400, str(exc), headers={KIND_HEADER: exc.kind}) from exc

    @app.post("/sessions/{sid}/snapshot", dependencies=auth)
    async def snapshot(sid: str) -> dict[str, str]:
        async with table.use(sid) as sandbox:
            return {"snapshot_id": await sandbox.snapshot()}

    @app.post("/sessions/{sid}/restore", dependencies=auth)
    async def restore(sid: str, req: RestoreRequest) -> dict[str, bool]:
        async with table.use(sid) as sandbox:
            try:
                await sandbox.restore(req.snapshot_id)
            except SandboxError as exc:
                raise HTTPException(400, str(exc)) from exc
            return {"ok": True}

    @app.post("/sessions/{sid}/fork", dependencies=auth)
    async def fork(sid: str) -> dict[str, str]:
        table.reserve()
        try:
            async with table.use(sid) as sandbox:
                child = await sandbox.fork()
        except BaseException:
            table._opening -= 1
            raise
        return {"session_id": table.add(child)}

    @app.delete("/sessions/{sid}", dependencies=auth)
    async def close(sid: str) -> dict[str, bool]:
        if not await table.close(sid):
            raise HTTPException(404, "no such session")
        return {"ok": True}

    return app


def serve_forever(*, host: str, port: int, token: str, max_sessions: int, idle_s: float) -> None:
    import uvicorn

    app = create_app(token, max_sessions=max_sessions, idle_s=idle_s)
    uvicorn.run(app, host=host, port=port, log_level="info")
