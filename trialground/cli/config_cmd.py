"""`trialground config show FILE` and `trialground config validate FILE`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from trialground.cli.common import fail
from trialground.errors import ConfigError
from trialground.orchestrator.run_config import RunConfig, dump_config, load_config

app = typer.Typer(help="Inspect and check run configurations.", no_args_is_help=True)

CONFIG_ARG = typer.Argument(..., help="YAML run configuration (- reads standard input)")
OVERRIDES = typer.Option([], "--set", metavar="KEY=VALUE", help="Dotted override (repeatable)")
JSON = typer.Option(False, "--json", help="Print JSON on stdout")


def _load(config: Path, overrides: list[str]) -> RunConfig:
    try:
        return load_config(config, overrides)
    except ConfigError as exc:
        fail(str(exc))


@app.command("show")
def show(config: Path = CONFIG_ARG, overrides: list[str] = OVERRIDES, as_json: bool = JSON) -> None:
    """Print the resolved configuration (the file, defaults filled in, overrides applied) after the same
    checks `train` makes before it starts (model directory, task sources, sinks, extras)."""
    cfg = _load(config, overrides)
    _check(cfg, purpose="eval")
    if as_json:
        typer.echo(json.dumps(cfg.model_dump(mode="json")))
    else:
        typer.echo(dump_config(cfg), nl=False)


@app.command("validate")
def validate(
    config: Path = CONFIG_ARG,
    overrides: list[str] = OVERRIDES,
    as_json: bool = JSON,
    train: bool = typer.Option(
        True, "--train/--eval", help="Check for training (default: also needs the trainer's packages)"
    ),
) -> None:
    """Check a configuration without starting anything: every check `train` makes before it starts.
    It also loads every task source as the run would (a generator, a dataset). Exit 0 when it can run,
    2 when not (each problem on its own line)."""
    from trialground.orchestrator.preflight import cautions, load_problems, problems

    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        if as_json:
            typer.echo(json.dumps({"ok": False, "problems": [str(exc)]}))
            raise typer.Exit(2) from None
        fail(str(exc))
    found, caution = problems(cfg, "train" if train else "eval", resume=False), cautions(cfg)
    if not any(p.startswith("tasks") for p in found):  # then load them as the run would
        found += load_problems(cfg)
    if as_json:
        report = {"ok": not found, "problems": found, "cautions": caution, "run_dir": str(cfg.run_dir)}
        typer.echo(json.dumps(report))
        raise typer.Exit(2 if found else 0)
    for line in caution:
        typer.echo(f"caution: {line}", err=True)
    if found:
        fail("\n  ".join(["the configuration cannot run:", *found]))
    typer.echo(f"ok: {config} can run (run directory {cfg.run_dir})")


def _check(cfg: RunConfig, *, purpose: str) -> None:
    from trialground.orchestrator.preflight import preflight

    try:
        preflight(cfg, "eval" if purpose == "eval" else "train")
    except ConfigError as exc:
        fail(str(exc))
