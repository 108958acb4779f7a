"""`trialground env serve SOURCE`: ToolEnv episodes over OpenEnv's protocol (`integrations/openenv.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Literal

import typer

from trialground.cli.common import EXIT_USAGE, err_console, fail, listen_or_fail, load_tasks
from trialground.errors import TaskError
from trialground.ports import ENV_SERVE_PORT

app = typer.Typer(help="Environment servers.", no_args_is_help=True)


@app.command("serve")
def serve(
    source: Annotated[
        str,
        typer.Argument(
            help="Task source (as `trialground tasks list` takes it; - reads JSONL tasks on stdin)"
        ),
    ],
    seed: Annotated[int, typer.Option(help="Seed of generated sources")] = 0,
    n: Annotated[int | None, typer.Option("--n", "-n", help="Number of tasks")] = None,
    split: Annotated[str | None, typer.Option(help="train or eval (default: the source's)")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port to listen on (0: any free port, printed at start)")
    ] = ENV_SERVE_PORT,
    token_file: Annotated[Path | None, typer.Option(help="File holding the token (required)")] = None,
    max_sessions: Annotated[int, typer.Option(help="Concurrent sessions at most")] = 8,
    idle_s: Annotated[float, typer.Option(help="Seconds before an idle session is closed")] = 300.0,
    max_turns: Annotated[int, typer.Option(help="Turns per episode")] = 8,
    tool_format: Annotated[
        str, typer.Option(help="Tool-call syntax of messages: json_tags, xml, auto")
    ] = "auto",
    max_body_mb: Annotated[float, typer.Option(help="Largest request body or WebSocket message")] = 8.0,
) -> None:
    """Serve ToolEnv episodes of SOURCE's tasks to OpenEnv clients (base URL http://HOST:PORT/oe/TOKEN)."""
    if token_file is None or not token_file.is_file():
        fail("--token-file must name an existing file holding the token", EXIT_USAGE)
    token = token_file.read_text().strip()
    if len(token) < 16:
        fail("the token must be at least 16 characters", EXIT_USAGE)
    if not 0 <= port < 65536 or max_sessions < 1 or idle_s <= 0 or max_body_mb <= 0:
        fail("--port must be 0..65535, --max-sessions >= 1, --idle-s > 0, --max-body-mb > 0", EXIT_USAGE)
    if split not in (None, "train", "eval"):
        fail(f"--split must be train or eval, got {split!r}", EXIT_USAGE)
    if importlib.util.find_spec("websockets") is None and importlib.util.find_spec("wsproto") is None:
        fail(
            "WebSocket sessions need the `websockets` package: pip install 'trialground[openenv]'", EXIT_USAGE
        )
    from pydantic import ValidationError

    from trialground.envs.config import EnvConfig

    try:
        env_config = EnvConfig(kind="tool", max_turns=max_turns, tool_format=tool_format)  # type: ignore[arg-type]
    except ValidationError as exc:
        names = {"max_turns": "--max-turns", "tool_format": "--tool-format"}
        problems = sorted({f"{names.get(str(e['loc'][-1]), e['loc'][-1])}: {e['msg']}" for e in exc.errors()})
        fail(f"invalid option: {'; '.join(problems)}", EXIT_USAGE)
    sock = listen_or_fail(host, port)  # before the tasks load: a port in use fails at once
    chosen: Literal["train", "eval"] | None = split  # type: ignore[assignment]
    try:
        with err_console.status(f"loading {source} ..."):
            tasks = load_tasks(source, seed=seed, n=n, split=chosen)
    except TaskError as e:
        fail(str(e), EXIT_USAGE)
    if not tasks:
        fail(f"{source}: no tasks{f' in split {split}' if split else ''}", EXIT_USAGE)
    from trialground.integrations.openenv import serve_forever

    serve_forever(
        tasks, host=host, port=port, token=token, env_config=env_config, max_sessions=max_sessions,
        idle_s=idle_s, max_body_bytes=int(max_body_mb * (1 << 20)), sock=sock,
    )  # fmt: skip
