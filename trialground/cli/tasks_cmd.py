"""`trialground tasks ...`."""

from __future__ import annotations

import typer

from trialground.cli.common import not_built

app = typer.Typer(help="Tasks commands.", no_args_is_help=True)


@app.command("list")
def _placeholder() -> None:
    """Not built yet."""
    not_built("tasks")
