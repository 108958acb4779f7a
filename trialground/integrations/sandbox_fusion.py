"""SandboxFusion's `/run_code` API, served by the sandbox service (`trialground sandbox serve`).

SandboxFusion clients (the `sandbox-fusion` package, verl's `sandbox_fusion` reward and tool) post one
program and get its outcome back; nothing persists between requests. Here each request runs in a sandbox
of its own that nothing else ran in (the same bwrap backend, namespaces, seccomp filter, cgroup and default
limits as a native session; no network), closed as soon as the answer is known. Sandboxes are made ready
ahead (`ready_pool.py`), so a request's program starts at once.

Routes (`install` adds them to the service's app):

- `POST /run_code` and `GET /v1/ping`, behind the service's bearer token like every native route;
- the same under `/sf/{token}/` (`SANDBOX_FUSION_ENDPOINT=http://HOST:PORT/sf/TOKEN`), because
  SandboxFusion clients send no credentials (`path_token.py`: the token from the path is checked by the
  service's guard as the bearer token, a wrong one is a 401 before the body is read, and the access log
  never shows it). Only these routes exist under the prefix (404 otherwise).

Request fields: `code`, `language`, `compile_timeout`, `run_timeout`, `memory_limit_MB` (-1: the
service's default), `stdin`, `files` (path -> base64 content, written to the working directory
`/workspace`), `fetch_files` (read back after the run). Unknown fields are ignored, as SandboxFusion does.
Languages: `python` (the sandbox's Python 3, run as `python3 FILE` so `__name__ == "__main__"`) and `bash`;
the code is written to `/workspace/.run_code.py` / `.run_code.sh`. Others are refused.

Response: `status` `Success` (the program ran and exited 0), `Failed` (it ran: non-zero exit, time limit,
memory or another limit) or `SandboxError` (it could not run: unsupported language, bad input, a broken
sandbox; `message` says which and why); `run_result` = {`status` `Finished` / `TimeLimitExceeded` /
`Error`, `execution_time` (s), `return_code` (the exit status; minus the signal number when a signal ended
it; null on a time limit), `stdout`, `stderr`}; `compile_result` is null (nothing is compiled); `files`
maps each fetched path to base64 (a missing one is left out and named in `message`). Malformed JSON or
fields of the wrong type are a 422 naming each field.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trialground.errors import SandboxError
from trialground.integrations.path_token import PathTokenMiddleware
from trialground.integrations.ready_pool import ReadyPool
from trialground.sandbox.base import WORKSPACE, ExecResult, ExecStatus, Limits, SandboxConfig
from trialground.sandbox.service.app import SessionTable, Text

PREFIX = "/sf"
ROUTES = frozenset({"/run_code", "/v1/ping"})


@dataclass(frozen=True)
class Runner:
    script: str  # where the code is written, relative to the workspace
    argv: tuple[str, ...]


RUNNERS = {
    "python": Runner(".run_code.py", ("python3", f"{WORKSPACE}/.run_code.py")),
    "bash": Runner(".run_code.sh", ("bash", f"{WORKSPACE}/.run_code.sh")),
}


class RunCodeRequest(BaseModel):
    """SandboxFusion's request, field for field (its names, its defaults)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    code: str
    language: str
    compile_timeout: float = Field(10.0, gt=0, le=3600)
    run_timeout: float = Field(10.0, gt=0, le=3600)
    memory_limit_MB: int = -1
    stdin: str | None = None
    files: dict[Text, str | None] = Field(default_factory=dict, description="path -> base64 content")
    fetch_files: list[Text] = Field(default_factory=list)


class CommandRunResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    files: dict[str, str] = Field(default_factory=dict)


def refused(message: str) -> RunCodeResponse:
    return RunCodeResponse(status="SandboxError", message=message)


def request_limits(req: RunCodeRequest, default: Limits) -> Limits:
    """The exec limits of a request: the service's defaults with its time and memory. ValueError names
    the field that is out of range."""
    memory = default.memory_mb if req.memory_limit_MB == -1 else req.memory_limit_MB
    fields = {
        **default.model_dump(),
        "wall_s": req.run_timeout,
        "cpu_s": req.run_timeout,
        "memory_mb": memory,
    }
    try:
        return Limits.model_validate(fields)
    except ValidationError as exc:
        names = {"memory_mb": "memory_limit_MB", "wall_s": "run_timeout", "cpu_s": "run_timeout"}
        problems = sorted({f"{names.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors()})
        raise ValueError("; ".join(problems)) from None


def request_files(req: RunCodeRequest, runner: Runner) -> dict[str, bytes]:
    """The request's files decoded (strict base64; null: an empty file). ValueError names the bad one."""
    files: dict[str, bytes] = {}
    for path, data in req.files.items():
        if path.lstrip("/").removeprefix(WORKSPACE.lstrip("/") + "/") == runner.script:
            raise ValueError(f"files[{path!r}]: that is where the code itself is written")
        try:
            files[path] = base64.b64decode(data, validate=True) if data is not None else b""
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"files[{path!r}]: not valid base64 ({exc})") from None
    return files


def _return_code(result: ExecResult) -> int | None:
    if result.exit_code is not None:
        return result.exit_code
    return -result.signal if result.signal is not None else None


def _limit_message(result: ExecResult, limits: Limits) -> str:
    match result.status:
        case ExecStatus.TIMEOUT:
            return f"time limit reached ({limits.wall_s:g} s wall, {limits.cpu_s:g} s CPU)"
        case ExecStatus.MEMORY_LIMIT:
            return f"memory limit reached ({limits.memory_mb} MiB)"
        case ExecStatus.PIDS_LIMIT:
            return f"process limit reached ({limits.pids} processes)"
        case ExecStatus.OUTPUT_LIMIT:
            return f"output limit reached ({limits.output_bytes} bytes of stdout or of stderr)"
        case ExecStatus.KILLED:
            return f"killed by signal {result.signal}"
    return ""


def to_response(result: ExecResult, limits: Limits) -> RunCodeResponse:
    """SandboxFusion's view of one command's `ExecResult`."""
    if result.status is ExecStatus.SANDBOX_ERROR:
        run = CommandRunResult(status="Error", execution_time=result.wall_s, stdout=result.stdout, stderr="")
        return RunCodeResponse(
            status="SandboxError", message=f"sandbox failed: {result.stderr}", run_result=run
        )
    timed_out = result.status is ExecStatus.TIMEOUT
    run = CommandRunResult(
        status="TimeLimitExceeded" if timed_out else "Finished",
        execution_time=result.wall_s,
        return_code=None if timed_out else _return_code(result),
        stdout=result.stdout,
        stderr=result.stderr,
    )
    return RunCodeResponse(
        status="Success" if result.ok else "Failed", message=_limit_message(result, limits), run_result=run
    )


async def run_code(
    req: RunCodeRequest, *, pool: ReadyPool, table: SessionTable, execs: asyncio.Semaphore
) -> RunCodeResponse:
    """Run one request in a sandbox of `pool` (new to it); the sandbox counts as a session of `table`
    while it lives (429 when the table is full) and runs under `execs` (requests beyond it queue)."""
    runner = RUNNERS.get(req.language)
    if runner is None:
        supported = ", ".join(sorted(RUNNERS))
        return refused(f"language {req.language!r} is not supported by this server (supported: {supported})")
    try:
        limits = request_limits(req, pool.config.limits)
        files = request_files(req, runner)
    except ValueError as exc:
        return refused(str(exc))
    files[runner.script] = req.code.encode()
    async with execs:
        table.reserve()
        try:
            return await _run_in_new_sandbox(req, runner, limits, files, pool)
        finally:
            table._opening -= 1


async def _run_in_new_sandbox(
    req: RunCodeRequest, runner: Runner, limits: Limits, files: dict[str, bytes], pool: ReadyPool
) -> RunCodeResponse:
    try:
        sandbox = await pool.open(files)
    except SandboxError as exc:
        if exc.kind in ("bad_path", "not_a_file", "write"):
            return refused(f"files: {exc}")
        return refused(f"sandbox failed: {exc}")
    except OSError as exc:
        return refused(f"files: {exc.strerror or exc}")
    try:
        try:
            result = await sandbox.exec(list(runner.argv), stdin=req.stdin, limits=limits)
        except SandboxError as exc:
            return refused(f"sandbox failed: {exc}")
        response = to_response(result, limits)
        if response.status == "SandboxError" or not req.fetch_files:
            return response
        fetched, problems = await _fetch(sandbox, req.fetch_files)
        message = "; ".join(p for p in (response.message, *problems) if p)
        return response.model_copy(update={"files": fetched, "message": message})
    finally:
        await sandbox.close()


async def _fetch(sandbox: Any, paths: list[str]) -> tuple[dict[str, str], list[str]]:
    fetched: dict[str, str] = {}
    problems: list[str] = []
    for path in paths:
        try:
            fetched[path] = base64.b64encode(await sandbox.read(path)).decode()
        except FileNotFoundError:
            problems.append(f"fetch_files: {path}: no such file")
        except SandboxError as exc:
            problems.append(f"fetch_files: {path}: {exc}")
        except OSError as exc:
            problems.append(f"fetch_files: {path}: {exc.strerror or exc}")
    return fetched, problems


def install(app: FastAPI, config: SandboxConfig | None = None, ready: int = 2) -> None:
    """Add the SandboxFusion routes to a service app from `trialground.sandbox.service.app.create_app`,
    sharing its session table and exec limit. `config` is the sandbox of every request (default: the
    service's default sandbox); `ready` sandboxes are kept ready ahead (`ready_pool.py`)."""
    table: SessionTable = app.state.table
    execs: asyncio.Semaphore = app.state.execs
    pool = ReadyPool(config or SandboxConfig(), ready)
    app.state.sandbox_fusion_pool = pool

    @app.post("/run_code")
    async def run(req: RunCodeRequest) -> dict[str, Any]:
        response = await run_code(req, pool=pool, table=table, execs=execs)
        return response.model_dump(mode="json")

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    app.add_middleware(PathTokenMiddleware, prefix=PREFIX, routes=ROUTES)
    service_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: FastAPI) -> AsyncIterator[None]:
        async with service_lifespan(app_):
            try:
                yield
            finally:
                await pool.close()

    app.router.lifespan_context = lifespan
