"""`trialground sandbox run|serve`: one command in a fresh sandbox; the sandbox HTTP service."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from trialground.cli.common import EXIT_INFRA, EXIT_USAGE, fail, listen_or_fail
from trialground.errors import SandboxError
from trialground.ports import SANDBOX_SERVE_PORT
from trialground.sandbox.base import ExecResult, Limits, SandboxConfig

app = typer.Typer(help="Sandbox commands.", no_args_is_help=True)
NOT_FOUND = "sandbox: command not found:"  # what the sandbox says when the program itself does not exist


def _workspace_files(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[str(path.relative_to(root))] = path.read_bytes()
    return files


@app.command("run", context_settings={"allow_interspersed_args": False})
def run(
    cmd: Annotated[list[str], typer.Argument(help="The command and its arguments (after --)")],
    workspace: Annotated[
        Path | None, typer.Option(help="Directory copied into the sandbox's workspace")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Wall-clock seconds")] = 10.0,
    memory: Annotated[int, typer.Option(help="Memory ceiling in MiB")] = 512,
    pids: Annotated[int, typer.Option(help="Maximum number of processes")] = 64,
    output_bytes: Annotated[int, typer.Option(help="Bytes kept of stdout and of stderr")] = 1_000_000,
    network: Annotated[
        bool, typer.Option(help="Outbound network from the sandbox's own namespace (needs slirp4netns)")
    ] = False,
    backend: Annotated[str, typer.Option(help="bwrap (default) or process (NO isolation)")] = "bwrap",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Run one command in a fresh sandbox. Exit 0 when a result was produced, whatever the program did."""
    from trialground.sandbox.backends import BACKENDS

    if workspace is not None and not workspace.is_dir():
        fail(f"workspace {str(workspace)!r} does not exist or is not a directory", EXIT_USAGE)
    try:
        limits = Limits(wall_s=timeout, cpu_s=timeout, memory_mb=memory, pids=pids, output_bytes=output_bytes)
        config = SandboxConfig(backend=backend, limits=limits, network=network)
    except ValidationError as exc:
        names = {"wall_s": "--timeout", "cpu_s": "--timeout", "memory_mb": "--memory", "pids": "--pids"}
        names.update({"output_bytes": "--output-bytes", "backend": "--backend"})
        problems = sorted({f"{names.get(str(e['loc'][-1]), e['loc'][-1])}: {e['msg']}" for e in exc.errors()})
        fail(f"invalid option: {'; '.join(problems)}", EXIT_USAGE)
    missing = BACKENDS.lookup(config.backend).missing(f"--backend {config.backend}")
    if missing:
        fail("; ".join(missing), EXIT_INFRA)
    files = _workspace_files(workspace) if workspace else None
    try:
        result = asyncio.run(_run_once(config, files, cmd))
    except SandboxError as exc:
        fail(f"sandbox failed: {exc}", EXIT_INFRA)
    if result.status == "sandbox_error":
        fail(f"sandbox failed: {result.stderr}", EXIT_INFRA)
    if as_json:
        print(json.dumps(result.model_dump(mode="json")))
    else:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        sys.stderr.write(f"[{result.status.value} exit={result.exit_code} wall={result.wall_s:.3f}s]\n")
    if result.exit_code == 127 and result.stderr.startswith(NOT_FOUND):
        fail(f"unknown command {cmd[0]!r}: not found in the sandbox (check the name and PATH)", EXIT_USAGE)


async def _run_once(config: SandboxConfig, files: dict[str, bytes] | None, cmd: list[str]) -> ExecResult:
    from trialground.sandbox.factory import open_sandbox

    async with await open_sandbox(config, files) as sandbox:
        return await sandbox.exec(cmd)


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port to listen on (0: any free port, printed at start)")
    ] = SANDBOX_SERVE_PORT,
    token_file: Annotated[Path | None, typer.Option(help="File holding the bearer token (required)")] = None,
    max_sessions: Annotated[int, typer.Option(help="Concurrent sandboxes at most")] = 32,
    idle_s: Annotated[float, typer.Option(help="Seconds before an idle session is reaped")] = 300.0,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body accepted (413 beyond)")] = 64.0,
    header_timeout_s: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's headers (else closed)")
    ] = 10.0,
    body_timeout_s: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's body after its headers (408)")
    ] = 60.0,
) -> None:
    """Serve the sandbox interface over HTTP (token authentication, per-session sandboxes), and
    SandboxFusion's `/run_code` (also at `/sf/TOKEN/run_code` for clients that send no credentials)."""
    if token_file is None or not token_file.is_file():
        fail("--token-file must name an existing file holding the token", EXIT_USAGE)
    token = token_file.read_text().strip()
    if len(token) < 16:
        fail("the token must be at least 16 characters", EXIT_USAGE)
    if not 0 <= port < 65536 or max_sessions < 1 or idle_s <= 0:
        fail("--port must be 0..65535, --max-sessions >= 1, --idle-s > 0", EXIT_USAGE)
    if max_body_mb <= 0 or header_timeout_s <= 0 or body_timeout_s <= 0:
        fail("--max-body-mb, --header-timeout-s and --body-timeout-s must be > 0", EXIT_USAGE)
    sock = listen_or_fail(host, port)
    from trialground.integrations import sandbox_fusion
    from trialground.sandbox.service.app import serve_forever

    os.environ.setdefault("TRIALGROUND_SANDBOX_SERVICE", "1")
    serve_forever(
        host=host, port=port, token=token, max_sessions=max_sessions, idle_s=idle_s,
        max_body_bytes=int(max_body_mb * (1 << 20)), header_timeout_s=header_timeout_s,
        body_timeout_s=body_timeout_s, extend=sandbox_fusion.install, sock=sock,
    )  # fmt: skip
