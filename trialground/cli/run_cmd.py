"""`trialground train CONFIG` and `trialground eval CONFIG`."""

from __future__ import annotations

import asyncio
import json
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
    TimeRemainingColumn,
)
from rich.table import Table

from trialground.cli.common import EXIT_INFRA, fail
from trialground.errors import ConfigError, TrialgroundError
from trialground.orchestrator.run_config import RunConfig, load_config, require_extras

if TYPE_CHECKING:
    from trialground.orchestrator.preflight import Purpose

console = Console(stderr=True)


def _config(
    config: Path | None, overrides: list[str], resume: Path | None, *, purpose: Purpose = "train"
) -> RunConfig:
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
    from trialground.orchestrator.preflight import cautions, preflight

    try:  # before anything is created or loaded: a failed start leaves nothing behind
        preflight(cfg, purpose, resume=resume is not None)
    except ConfigError as exc:
        fail(str(exc))
    for line in cautions(cfg) if purpose == "train" else ():  # about a training step's shape
        console.print(f"[yellow]caution:[/yellow] {line}", highlight=False)
    return cfg


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def format_loss(value: float) -> str:
    """A loss that stays readable at every scale (GRPO losses near zero are not `+0.0000`)."""
    return f"{value:+.4f}" if value == 0.0 or abs(value) >= 1e-3 else f"{value:+.2e}"


class StepLine:
    """The progress line's text: the latest step's reward and loss, and the latest held-out evaluation."""

    def __init__(self) -> None:
        self.evaluation = ""

    def __call__(self, step: int, metrics: dict[str, float]) -> str:
        for key, name in (("eval/pass@1", "eval"), ("probe/pass@1", "probe")):
            if key in metrics:
                self.evaluation = f"{name} {_percent(metrics[key])} @ step {step}"
                break
        parts = []
        if "reward/mean" in metrics:
            parts.append(f"reward {metrics['reward/mean']:.3f}")
        if "train/loss" in metrics:
            parts.append(f"loss {format_loss(metrics['train/loss'])}")
        if self.evaluation:
            parts.append(self.evaluation)
        return "  ".join(parts)


def train(
    config: Path | None = typer.Argument(None, help="YAML run configuration (- reads standard input)"),
    overrides: list[str] = typer.Option([], "--set", help="Dotted override KEY=VALUE, repeatable"),
    resume: Path | None = typer.Option(None, "--resume", help="Continue the run in this run directory"),
) -> None:
    """Train a policy: rollouts in sandboxes, rewards, group advantages, policy updates."""
    cfg = _config(config, overrides, resume)
    from trialground.orchestrator.ranks import ranks, serve_rank

    # Under torchrun or Ray (docs/distributed.md) rank 0 is the run; the other ranks only train.
    with ranks(cfg) as (cfg, rank):
        if rank is not None and rank.rank > 0:
            serve_rank(rank, cfg)
        else:
            _train(cfg, resume)


def _train(cfg: RunConfig, resume: Path | None) -> None:
    from trialground.orchestrator.loop import run
    from trialground.train.checkpoint import CheckpointError

    columns = (
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    )
    line = StepLine()
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("train", total=cfg.loop.steps, info="evaluating the starting policy")

        def on_step(step: int, metrics: dict[str, float]) -> None:
            bar.update(task, completed=step, info=line(step, metrics))

        try:
            summary = asyncio.run(run(cfg, resume=resume is not None, progress=on_step))
        except (FileExistsError, FileNotFoundError, CheckpointError) as exc:
            fail(str(exc))
        except TrialgroundError as exc:
            fail(f"{exc.boundary} failure: {exc}", code=EXIT_INFRA)
    table = Table(title=f"run {cfg.name}", show_header=False)
    table.add_row("run directory", summary.run_dir)
    table.add_row("steps", str(summary.steps))
    table.add_row("held-out pass@1 before", _percent(summary.eval_before))
    table.add_row("held-out pass@1 after", _percent(summary.eval_after))
    if summary.sampled_before is not None or summary.sampled_after is not None:
        table.add_row("held-out sampled pass@1 before", _percent(summary.sampled_before))
        table.add_row("held-out sampled pass@1 after", _percent(summary.sampled_after))
    table.add_row("alerts", str(summary.alerts))
    if summary.stopped_by:
        table.add_row("stopped early by", f"{summary.stopped_by} (continue with --resume {summary.run_dir})")
    table.add_row("wall time", f"{summary.seconds:.0f} s")
    Console().print(table)


def evaluate(
    config: Path = typer.Argument(
        ..., help="YAML run configuration, its eval split is used (- reads standard input)"
    ),
    overrides: list[str] = typer.Option([], "--set", help="Dotted override KEY=VALUE, repeatable"),
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
