"""An OpenEnv environment server over `ToolEnv` episodes (`trialground env serve`).

OpenEnv's client (`openenv.core.GenericEnvClient`, or any `EnvClient` subclass) drives an episode over
the `/ws` WebSocket: `reset` -> the task's prompt and tool list, `step` -> the tools' output, until `done`
with the grader's reward. Messages are OpenEnv's: `{"type": "reset"|"step"|"state"|"close", "data": ...}`
in, `{"type": "observation"|"state"|"error", "data": ...}` out, an observation's data being
`{"observation": {...}, "reward": float | null, "done": bool}`.

- reset data: `task_id` (a task's id), else `seed` (task number `seed % len(tasks)`), else the next task
  in turn; `episode_id` (on a WebSocket: optional, echoed back; over HTTP: see below). Any other key is an
  error naming it. A reset in the middle of an episode ends that episode (its sandbox is closed) and
  starts the new one in a fresh environment: nothing of the old episode goes on under the new task's id.
- step data (the action): `{"message": TEXT}` (the model's text, tool calls in the server's
  `tool_format`, as `ToolEnv.step` takes it) or `{"tool": NAME, "arguments": {...}}` (one call).
- the observation: `text`, `turn`, `task_id`, `episode_id`, `counters`, and once done `finish_reason`,
  `verdict` (passed, score, detail, flags), `reward_components` (outcome and the shaping terms' raw
  values) and `error` (an infrastructure failure: then `reward` is null).
  `reward` is the reward's total at a graded end, null before.
- `state`: `episode_id`, `step_count`, `task_id`, `turn`, `done`, `finish_reason`, `counters`.

Each WebSocket connection is one session with its own `ToolEnv` (its own sandbox per episode), closed when
the connection ends; only that connection reaches it. The HTTP routes are the same episodes without a
connection, so a session is bound to its client by a secret: `POST /reset` without `episode_id` opens a
session and returns its `episode_id`, 128 random bits issued by the server (never a name the client
chose); `POST /step`, `GET /state` and a further `POST /reset` of that session name it (`episode_id` in
the body / the query). An id the server did not issue is a 404, so under the one shared token a client
cannot step, reset or read another client's episode without being given its id. `GET /health` (no
token), `GET /schema`, `GET /metadata`, and `POST /mcp`, a JSON-RPC 2.0 route that answers as OpenEnv's
own server does for an environment without MCP tools (tools/list and tools/call: error -32603; the tools
are called inside episodes). `/openapi.json` declares OpenEnv's HTTP API version (`OPENENV_API_VERSION`),
so `openenv validate URL` passes; `app_from_environ` builds the app for the OpenEnv environment directory
`deploy/trialground_env` (`server.app:app`).

Limits: at most `max_sessions` sessions of both kinds at once (a WebSocket beyond it gets an error
message with code `CAPACITY_REACHED` and is closed, an HTTP reset a 429); a session unused for `idle_s`
seconds is closed (its WebSocket too) and counted in `/health`'s `reaped`. Auth: every route but
`/health` needs the token, as `Authorization: Bearer` or in the path (`http://HOST:PORT/oe/TOKEN` as the
client's base URL, `path_token.py`); HTTP bodies are capped and deadline-bound as in the sandbox service.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

import trialground
from trialground import plainjson
from trialground.envs.base import Grading, Observation
from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.errors import TrialgroundError
from trialground.integrations.openenv_wire import (
    OPENENV_API_VERSION,
    EnvAction,
    EnvObservation,
    EnvState,
    ResetRequest,
    StepRequest,
    mcp_reply,
)
from trialground.integrations.path_token import BearerWebSocketGuard, PathTokenMiddleware
from trialground.rollout.scoring import score_end
from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.service.app import reaping_lifespan
from trialground.sandbox.service.http_guard import GuardMiddleware, GuardSettings
from trialground.tasks.model import Task
from trialground.verify.config import RewardConfig
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Rubric

PREFIX = "/oe"


class EpisodeError(Exception):
    """A request the session cannot carry out; `code` is OpenEnv's error code."""

    def __init__(self, message: str, code: str = "VALIDATION_ERROR", status: int = 422) -> None:
        super().__init__(message)
        self.code, self.status = code, status


@dataclass
class Session:
    """One client's environment and the episode it is in."""

    env: ToolEnv
    tasks: TaskPicker
    rubric: Rubric
    make_env: Callable[[], ToolEnv]
    kind: str = "ws"  # "ws" (bound to its connection) or "http" (bound to its server-issued id)
    episode_id: str | None = None
    task: Task | None = None
    step_count: int = 0
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    on_reap: Callable[[], Awaitable[None]] | None = None  # a WebSocket session closes its connection

    async def reset(self, data: dict[str, Any], episode_id: str | None = None) -> dict[str, Any]:
        try:
            req = ResetRequest.model_validate(data)
        except ValidationError as exc:
            raise EpisodeError(f"reset: {_errors(exc)}") from None
        task = self.tasks.pick(req.task_id, req.seed)
        if self.task is not None:  # an episode ran here (finished or not): end it, start afresh
            old, self.env = self.env, self.make_env()
            self.task = None
            await old.close()
        try:
            obs = await self.env.reset(task)
        except TrialgroundError as exc:
            raise EpisodeError(f"reset: {exc}", code="EXECUTION_ERROR", status=503) from None
        self.task, self.step_count = task, 0
        self.episode_id = episode_id or req.episode_id or uuid.uuid4().hex
        return self._payload(obs)

    async def step(self, data: dict[str, Any]) -> dict[str, Any]:
        try:
            action = EnvAction.model_validate(data)
        except ValidationError as exc:
            raise EpisodeError(f"step: {_errors(exc)}") from None
        if self.task is None:
            raise EpisodeError("step before reset: reset the environment first", code="EXECUTION_ERROR")
        self.step_count += 1
        return self._payload(await self.env.step(self.tasks.text_of(action)))

    def state(self) -> dict[str, Any]:
        st = self.env.state
        task_id = self.task.id if self.task else None
        return EnvState(
            episode_id=self.episode_id, step_count=self.step_count, task_id=task_id, turn=st.turn,
            done=st.done, finish_reason=st.finish_reason, counters=dict(st.counters),
        ).model_dump(mode="json")  # fmt: skip

    def _payload(self, obs: Observation) -> dict[str, Any]:
        """The OpenEnv answer; at the end, the reward from the one reward seam (the same as the native
        loop's for the same episode)."""
        assert self.task is not None and self.episode_id is not None
        end = obs.end
        error = end.error if end is not None else None
        verdict = None
        if end is not None and end.graded is not None:
            v = end.graded.verdict
            flags = [f.name for f in v.flags]
            verdict = {"passed": v.passed, "score": v.score, "detail": v.detail, "flags": flags}
        reward = score_end(self.rubric, end) if obs.done and end is not None else None
        observation = EnvObservation(
            text=obs.text, turn=obs.turn, task_id=self.task.id, episode_id=self.episode_id,
            counters=dict(self.env.counters),
            finish_reason=end.finish_reason if end is not None else None, verdict=verdict,
            error=error.model_dump(mode="json") if error is not None else None,
            reward_components=_components(reward) if reward is not None else None,
        )  # fmt: skip
        value = None if reward is None or reward.dropped else reward.total
        return {"observation": observation.model_dump(mode="json"), "reward": value, "done": obs.done}


def _components(reward: Reward) -> dict[str, float]:
    return {"outcome": reward.outcome, **{c.name: c.value for c in reward.components}}


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "data"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class TaskPicker:
    """Which task a reset gets, and how an action becomes the text `ToolEnv.step` takes."""

    def __init__(self, tasks: Sequence[Task], tool_format: str) -> None:
        if not tasks:
            raise ValueError("an environment server needs at least one task")
        self.tasks = list(tasks)
        self.by_id = {t.id: t for t in self.tasks}
        self._turns = itertools.count()
        self.fmt = "xml" if tool_format == "xml" else "json_tags"

    def pick(self, task_id: str | None, seed: int | None) -> Task:
        if task_id is not None:
            task = self.by_id.get(task_id)
            if task is None:
                raise EpisodeError(f"reset: no task with id {task_id!r} on this server", status=404)
            return task
        index = seed if seed is not None else next(self._turns)
        return self.tasks[index % len(self.tasks)]

    def text_of(self, action: EnvAction) -> str:
        if action.message is not None:
            return action.message
        assert action.tool is not None
        return format_tool_call(action.tool, action.arguments, self.fmt)  # type: ignore[arg-type]


class SessionTable:
    """Live sessions (WebSocket and HTTP), their cap and the idle reaper."""

    def __init__(self, max_sessions: int, idle_s: float) -> None:
        self.max_sessions, self.idle_s = max_sessions, idle_s
        self.sessions: dict[str, Session] = {}
        self.reaped = 0

    def add(self, key: str, session: Session) -> None:
        if len(self.sessions) >= self.max_sessions:
            raise EpisodeError(
                f"Server at capacity: {len(self.sessions)}/{self.max_sessions} sessions active",
                code="CAPACITY_REACHED", status=429,
            )  # fmt: skip
        self.sessions[key] = session

    @contextlib.asynccontextmanager
    async def use(self, key: str, kind: str = "ws") -> AsyncIterator[Session]:
        session = self.sessions.get(key)
        if session is None or session.kind != kind:
            raise EpisodeError(f"no episode {key!r} (never reset, or reaped after being idle)", status=404)
        session.busy += 1
        try:
            async with session.lock:
                yield session
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()

    async def close(self, key: str) -> None:
        session = self.sessions.pop(key, None)
        if session is not None:
            await session.env.close()

    async def reap(self) -> None:
        now = time.monotonic()
        idle = [k for k, s in self.sessions.items() if not s.busy and now - s.last_used > self.idle_s]
        for key in idle:
            session = self.sessions.get(key)
            self.reaped += 1
            await self.close(key)
            if session is not None and session.on_reap is not None:
                with contextlib.suppress(Exception):
                    await session.on_reap()

    async def close_all(self) -> None:
        for key in list(self.sessions):
            await self.close(key)


def create_app(
    tasks: Sequence[Task], grader: Grading, token: str, *, env_config: EnvConfig | None = None,
    sandbox_config: SandboxConfig | None = None, max_sessions: int = 8, idle_s: float = 300.0,
    max_body_bytes: int = 8 << 20, close_grader: Callable[[], Awaitable[None]] | None = None,
    reward: RewardConfig | None = None,
) -> FastAPI:  # fmt: skip
    """The server as an ASGI app (serve it with `sandbox.service.uvicorn_config`); episodes are scored with
    the rubric of `reward` (default settings when None)."""
    config = env_config or EnvConfig(kind="tool")
    rubric = Rubric.from_config(reward or RewardConfig())
    picker = TaskPicker(tasks, config.tool_format)
    table = SessionTable(max_sessions, idle_s)
    box = sandbox_config or SandboxConfig()

    def new_env() -> ToolEnv:
        return ToolEnv(grader, config, box)

    def new_session(kind: str) -> Session:
        return Session(new_env(), picker, rubric, new_env, kind=kind)

    app = FastAPI(
        title="trialground OpenEnv environment server",
        version=OPENENV_API_VERSION,
        lifespan=reaping_lifespan(table, idle_s, close_grader),
    )
    app.state.table = table
    app.add_middleware(GuardMiddleware, settings=GuardSettings(token, max_body_bytes=max_body_bytes))
    app.add_middleware(BearerWebSocketGuard, token=token)
    app.add_middleware(PathTokenMiddleware, prefix=PREFIX)

    @app.exception_handler(EpisodeError)
    async def episode_error(_: Request, exc: EpisodeError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "code": exc.code}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()
        ]
        return JSONResponse({"detail": "; ".join(parts) or "invalid request"}, status_code=422)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": len(table.sessions), "reaped": table.reaped}

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        return {
            "name": "trialground",
            "description": f"trialground tool episodes over {len(picker.tasks)} tasks, graded by execution",
            "version": trialground.__version__,
        }

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        return {
            "action": EnvAction.model_json_schema(),
            "observation": EnvObservation.model_json_schema(),
            "state": EnvState.model_json_schema(),
        }

    @app.post("/mcp")
    async def mcp(request: Request) -> dict[str, Any]:
        return mcp_reply(await request.body())

    @app.post("/reset")
    async def reset(body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = body or {}
        given = data.get("episode_id")
        if given is not None:  # a session this client opened (its id is the secret that binds it)
            async with table.use(str(given), kind="http") as session:
                return await session.reset(data, episode_id=str(given))
        key = secrets.token_hex(16)
        table.add(key, new_session("http"))
        try:
            async with table.use(key, kind="http") as session:
                return await session.reset(data, episode_id=key)
        except EpisodeError:
            await table.close(key)  # nothing was started: free the slot
            raise

    @app.post("/step")
    async def step(req: StepRequest) -> dict[str, Any]:
        async with table.use(req.episode_id, kind="http") as session:
            return await session.step(req.action.model_dump(exclude_defaults=True))

    @app.get("/state")
    async def state(episode_id: str) -> dict[str, Any]:
        async with table.use(episode_id, kind="http") as session:
            return session.state()

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        key = f"ws-{uuid.uuid4().hex}"
        session = new_session("ws")

        async def on_reap() -> None:
            await _send_error(websocket, f"session closed after {idle_s:g} s idle", "SESSION_ERROR")
            await websocket.close(code=1000, reason="idle session reaped")

        session.on_reap = on_reap
        try:
            table.add(key, session)
        except EpisodeError as exc:
            # Answer the client's first message with the refusal (a close right away would reach a
            # client as a broken send, not as the reason), then close.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await websocket.receive_text()
            await _send_error(websocket, str(exc), exc.code)
            with contextlib.suppress(RuntimeError):
                await websocket.close()
            return
        try:
            await _serve_messages(websocket, table, key)
        finally:
            await table.close(key)
            with contextlib.suppress(RuntimeError):
                await websocket.close()

    return app


async def _serve_messages(websocket: WebSocket, table: SessionTable, key: str) -> None:
    while True:
        try:
            raw = await websocket.receive_text()
        except (WebSocketDisconnect, RuntimeError):
            return
        if key not in table.sessions:  # reaped while the client was away
            return
        try:
            message = plainjson.loads(raw, plainjson.REQUEST_BODY)
            if not isinstance(message, dict):
                raise ValueError("a message is a JSON object")
        except ValueError as exc:
            await _send_error(websocket, f"invalid JSON: {exc}", "INVALID_JSON")
            continue
        kind, data = message.get("type"), message.get("data", {})
        if kind == "close":
            return
        try:
            if not isinstance(data, dict):
                raise EpisodeError("`data` must be a JSON object")
            async with table.use(key) as session:
                if kind == "reset":
                    reply = {"type": "observation", "data": await session.reset(data)}
                elif kind == "step":
                    reply = {"type": "observation", "data": await session.step(data)}
                elif kind == "state":
                    reply = {"type": "state", "data": session.state()}
                else:
                    raise EpisodeError(
                        f"unknown message type {kind!r} (reset, step, state, close)", "UNKNOWN_TYPE"
                    )
        except EpisodeError as exc:
            await _send_error(websocket, str(exc), exc.code)
            continue
        except Exception as exc:  # a bug or a broken sandbox: the client hears of it, the server goes on
            await _send_error(websocket, f"{type(exc).__name__}: {exc}", "EXECUTION_ERROR")
            continue
        await websocket.send_text(json.dumps(reply))


async def _send_error(websocket: WebSocket, message: str, code: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.send_text(json.dumps({"type": "error", "data": {"message": message, "code": code}}))


ENV_VARS = {
    "TRIALGROUND_ENV_SOURCE": "the task source (default codegen)",
    "TRIALGROUND_ENV_N": "how many tasks (default: the source's)",
    "TRIALGROUND_ENV_TOKEN": "the token (or TRIALGROUND_ENV_TOKEN_FILE: a file holding it); required",
}


def app_from_environ(environ: Mapping[str, str]) -> FastAPI:
    """The server as an ASGI app configured by `ENV_VARS`, for hosts that import `module:app` (the OpenEnv
    manifest's `server.app:app`, `uvicorn server.app:app`); default sandbox, reward and episode settings."""
    from trialground.tasks.sources import load_source
    from trialground.verify.grader import make_grader

    token = environ.get("TRIALGROUND_ENV_TOKEN", "").strip()
    token_file = environ.get("TRIALGROUND_ENV_TOKEN_FILE")
    if not token and token_file:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
    if len(token) < 16:
        raise ValueError(
            "set TRIALGROUND_ENV_TOKEN (or TRIALGROUND_ENV_TOKEN_FILE): a token of 16+ characters"
        )
    n_text = environ.get("TRIALGROUND_ENV_N")
    tasks = load_source(environ.get("TRIALGROUND_ENV_SOURCE", "codegen"), n=int(n_text) if n_text else None)
    sandbox_config = SandboxConfig()
    grader = make_grader(sandbox_config)
    return create_app(tasks, grader, token, sandbox_config=sandbox_config, close_grader=grader.close)


def serve_forever(
    tasks: Sequence[Task], *, host: str, port: int, token: str, env_config: EnvConfig, max_sessions: int,
    idle_s: float, max_body_bytes: int, header_timeout_s: float = 10.0, sock: socket.socket | None = None,
) -> None:  # fmt: skip
    """Serve until interrupted, grading with a `Grader` of the default sandbox and reward settings.
    `sock`: a socket already listening on host:port (else one is opened here)."""
    import uvicorn

    from trialground.ports import listen
    from trialground.sandbox.service.app import uvicorn_config
    from trialground.verify.grader import make_grader

    sandbox_config = SandboxConfig()
    grader = make_grader(sandbox_config)
    app = create_app(
        tasks, grader, token, env_config=env_config, sandbox_config=sandbox_config, max_sessions=max_sessions,
        idle_s=idle_s, max_body_bytes=max_body_bytes, close_grader=grader.close,
    )  # fmt: skip
    if sock is None:
        sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    print(f"trialground env server: listening on http://{shown}:{sock.getsockname()[1]}", flush=True)
    config = uvicorn_config(
        app, header_timeout_s=header_timeout_s, log_level="info", ws_max_size=max_body_bytes
    )
    uvicorn.Server(config).run(sockets=[sock])
