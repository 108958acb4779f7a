"""`trialground report RUN_DIR` and `trialground dashboard RUN_DIR`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trialground.cli.common import EXIT_INFRA, fail, require
from trialground.ports import DASHBOARD_PORT, listen_error


def report(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (holds metrics.jsonl)")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output file (default RUN_DIR/report.html)")
    ] = None,
) -> None:
    """Write one self-contained HTML report of a run (readable offline)."""
    require(("pyarrow", "scipy"), "run", "trialground report")
    from trialground.monitor.report import write_report

    if not run_dir.is_dir():
        fail(f"no run directory at {run_dir}")
    try:
        path = write_report(run_dir, out)
    except OSError as exc:
        fail(f"could not write the report: {exc}", code=EXIT_INFRA)
    Console(soft_wrap=True).print(f"report written to {path}", highlight=False)


def dashboard(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (holds metrics.jsonl)")],
    host: Annotated[str, typer.Option(help="Interface to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free port)")] = DASHBOARD_PORT,
    refresh: Annotated[float, typer.Option(min=0.2, help="Seconds between page refreshes")] = 3.0,
) -> None:
    """Serve a live dashboard of a run that refreshes as the run goes."""
    require(("pyarrow", "scipy"), "run", "trialground dashboard")
    from trialground.monitor.dashboard import Dashboard

    if not run_dir.is_dir():
        fail(f"no run directory at {run_dir}")
    try:
        dash = Dashboard(run_dir, host=host, port=port, refresh_s=refresh)
    except OSError as exc:
        fail(listen_error(host, port, exc), code=EXIT_INFRA)
    Console(soft_wrap=True).print(f"dashboard of {run_dir} at {dash.url} (Ctrl-C to stop)", highlight=False)
    try:
        dash.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        dash.close()
