"""`trialground train CONFIG` and `trialground eval CONFIG`."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from trialground.cli.common import EXIT_INFRA, fail
from trialground.cli.stopping import Interrupted, StopOnSignal, exit_status, resume_command, where_stopped
from trialground.cli.train_view import percent, train_view
from trialground.errors import ConfigError, TrialgroundError
from trialground.orchestrator.run_config import RunConfig, load_config, require_extras

if TYPE_CHECKING:
    from trialground.orchestrator.preflight import Purpose

console = Console(stderr=True)


def _config(
    config: Path | None,
    overrides: list[str],
    resume: Path | None,
    *,
    purpose: Purpose = "train",
    overwrite: bool = False,
) -> RunConfig:
    if resume is not None and overwrite:
        fail("give either --resume (continue the run) or --overwrite (replace it), not both")
    if resume is not None:
        resolved = resume / "config.yaml"
        if not resolved.is_file():
            fail(f"--resume {resume}: no config.yaml there; is it a run directory?")
        if config is not None:
            fail("give either CONFIG or --resume RUN_DIR, not both (a resumed run keeps its config)")
        config = resolved
    if config is None:
        fail("missing CONFIG (a YAML run configuration, e.g. examples/quickstart.yaml)")
    try:
        cfg = load_config(config, overrides)
        require_extras(cfg)
    except ConfigError as exc:
        fail(str(exc))
    if resume is not None and cfg.run_dir.resolve() != resume.resolve():
        cfg = cfg.model_copy(update={"output_dir": str(resume.parent), "name": resume.name})
    if overwrite:
        _replace(cfg.run_dir)
    from trialground.orchestrator.preflight import cautions, preflight

    try:  # before anything is created or loaded: a failed start leaves nothing behind
        preflight(cfg, purpose, resume=resume is not None)
    except ConfigError as exc:
        fail(str(exc))
    for line in cautions(cfg) if purpose == "train" else ():  # about a training step's shape
        console.print(f"[yellow]caution:[/yellow] {line}", highlight=False)
    if purpose == "train":
        from trialground.orchestrator.memory_check import estimate_line

        memory = estimate_line(cfg)
        if memory is not None and os.environ.get("RANK", "0") == "0":
            console.print(memory, highlight=False, soft_wrap=True, markup=False)
    return cfg


def _replace(run_dir: Path) -> None:
    """`--overwrite`: delete an earlier run in `run_dir` (a directory with a config.yaml, nothing else)."""
    import os
    import shutil

    if not run_dir.exists() or os.environ.get("RANK", "0") != "0":  # under torchrun rank 0 deletes it
        return
    if not (run_dir / "config.yaml").is_file():
        fail(f"--overwrite: {run_dir} is not a run directory (no config.yaml); not deleting it")
    shutil.rmtree(run_dir)


def train(
    config: Path | None = typer.Argument(None, help="YAML run configuration (- reads standard input)"),
    overrides: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Dotted override, repeatable"),
    resume: Path | None = typer.Option(
        None,
        "--resume",
        metavar="RUN_DIR",
        help="Continue the run in this run directory (from its newest checkpoint, or from step 0)",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete the run directory's earlier run and start again"
    ),
) -> None:
    """Train a policy: rollouts in sandboxes, rewards, group advantages, policy updates.

    Ctrl-C or SIGTERM stops after the step in progress, checkpointed (a second one stops at once);
    `--resume RUN_DIR` continues."""
    stopper = StopOnSignal()
    run_dir: Path | None = None
    with stopper.installed():
        try:
            cfg = _config(config, overrides, resume, overwrite=overwrite)
            run_dir = cfg.run_dir
            from trialground.orchestrator.ranks import ranks, serve_rank

            # Under torchrun or Ray (docs/distributed.md) rank 0 is the run; the other ranks only train.
            with ranks(cfg) as (cfg, rank):
                if rank is not None and rank.rank > 0:
                    serve_rank(rank, cfg)
                else:
                    _train(cfg, resume, stopper)
        except Interrupted as stop:
            if run_dir is not None and (run_dir / "config.yaml").is_file():
                console.print(_stopped_line(run_dir), highlight=False, soft_wrap=True)
            else:
                console.print(f"{stop}: stopped before the run started", highlight=False)
            raise typer.Exit(exit_status(stop.signum)) from None


def _stopped_line(run_dir: Path) -> str:
    """The one line a stopped run ends with: where it stopped and the command that continues it."""
    return f"{where_stopped(run_dir)}; continue with: {resume_command(run_dir)}"


def _train(cfg: RunConfig, resume: Path | None, stopper: StopOnSignal) -> None:
    from trialground.orchestrator.loop import run
    from trialground.train.checkpoint import CheckpointError

    with train_view(console, cfg.loop.steps, cfg.monitor.log_interval, resumed=resume is not None) as show:

        def on_step(step: int, metrics: dict[str, float]) -> None:
            stopper.arm()  # from the first step on, a signal stops between steps
            show(step, metrics)

        try:
            coro = run(cfg, resume=resume is not None, progress=on_step, stop=stopper.requested)
            summary = asyncio.run(stopper.watch(coro))
        except (FileExistsError, FileNotFoundError, CheckpointError) as exc:
            fail(str(exc))
        except TrialgroundError as exc:
            kept = (cfg.run_dir / "config.yaml").is_file()  # a failed start removes its directory
            fail(f"{exc.boundary} failure: {exc}" + (f"\n{_stopped_line(cfg.run_dir)}" if kept else ""),
                 code=EXIT_INFRA)  # fmt: skip
    table = Table(title=f"run {cfg.name}", show_header=False)
    table.add_row("run directory", summary.run_dir)
    table.add_row("steps", str(summary.steps))
    table.add_row("held-out pass@1 before", percent(summary.eval_before))
    table.add_row("held-out pass@1 after", percent(summary.eval_after))
    if summary.sampled_before is not None or summary.sampled_after is not None:
        table.add_row("held-out sampled pass@1 before", percent(summary.sampled_before))
        table.add_row("held-out sampled pass@1 after", percent(summary.sampled_after))
    table.add_row("alerts", str(summary.alerts))
    if summary.stopped_by:
        table.add_row("stopped early by", summary.stopped_by)
    table.add_row("wall time", f"{summary.seconds:.0f} s")
    Console().print(table)
    if summary.stopped_by:
        console.print(_stopped_line(Path(summary.run_dir)), highlight=False, soft_wrap=True)
    if stopper.signum is not None:
        raise typer.Exit(exit_status(stopper.signum))


def evaluate(
    config: Path = typer.Argument(
        ..., help="YAML run configuration, its eval split is used (- reads standard input)"
    ),
    overrides: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Dotted override, repeatable"),
    checkpoint: Path | None = typer.Option(None, help="A checkpoints/step_N directory to evaluate"),
    samples: int = typer.Option(
        1, min=1, max=1024, help="Also sample this many per task at the training temperature (pass@k)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object of metrics on stdout"),
    episodes: Path | None = typer.Option(
        None,
        help="A directory to write every episode to (eval.parquet, eval_sampled.parquet; "
        "the run directory's trajectory columns)",
    ),
) -> None:
    """Evaluate a policy on the held-out split: greedy pass@1, and sampled pass@1/pass@k with --samples."""
    cfg = _config(config, overrides, None, purpose="eval")
    from trialground.orchestrator.evaluate_run import evaluate_run

    if checkpoint is not None and not any(
        (checkpoint / sub).is_file() for sub in ("hf/config.json", "adapter/adapter_config.json")
    ):
        fail(
            f"--checkpoint {checkpoint}: no hf/ or adapter/ directory there "
            "(expected runs/<name>/checkpoints/step_N)"
        )
    if episodes is not None:  # before the evaluation, not after it
        try:
            episodes.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            fail(f"--episodes {episodes}: cannot write episodes there ({exc.strerror or exc})")
    columns = (
        TextColumn("[bold]eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks"),
        TimeElapsedColumn(),
    )
    try:
        # kept on screen when done (`eval ━━━ 128/128 tasks 0:01:02`), like train's line
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task("eval", total=None)  # the task count is known only once the sources are built
            done = [0]

            def on_start(total: int) -> None:
                bar.update(task, total=total)

            def on_task() -> None:
                done[0] += 1
                bar.update(task, completed=done[0])

            metrics = asyncio.run(
                evaluate_run(
                    cfg,
                    checkpoint=checkpoint,
                    samples=samples,
                    on_task=on_task,
                    on_start=on_start,
                    episodes=episodes,
                )
            )
    except TrialgroundError as exc:
        fail(f"{exc.boundary} failure: {exc}", code=EXIT_INFRA)
    if as_json:
        typer.echo(json.dumps(metrics, sort_keys=True))
        return
    table = Table(title="evaluation")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in sorted(metrics.items()):
        table.add_row(key, f"{value:.4f}")
    Console().print(table)
