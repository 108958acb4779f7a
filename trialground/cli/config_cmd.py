"""`trialground config show FILE`."""

from __future__ import annotations

from pathlib import Path

import typer

from trialground.cli.common import fail
from trialground.errors import ConfigError
from trialground.orchestrator.run_config import dump_config, load_config

app = typer.Typer(help="Inspect run configurations.", no_args_is_help=True)


@app.command("show")
def show(
    config: Path = typer.Argument(..., help="YAML run configuration"),
    overrides: list[str] = typer.Option([], "--set", help="Dotted override KEY=VALUE (repeatable)"),
) -> None:
    """Print the resolved configuration: the file, defaults filled in, overrides applied."""
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        fail(str(exc))
    typer.echo(dump_config(cfg), nl=False)
