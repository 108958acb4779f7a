"""What `trialground train` shows while it runs: a progress bar on a terminal, and where stderr is a file
(nohup, Slurm, CI, a container's log) one plain line every `monitor.log_interval` steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

OnStep = Callable[[int, dict[str, float]], None]


def percent(value: float | None) -> str:
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
                self.evaluation = f"{name} {percent(metrics[key])} @ step {step}"
                break
        parts = []
        if "reward/mean" in metrics:
            parts.append(f"reward {metrics['reward/mean']:.3f}")
        if "train/loss" in metrics:
            parts.append(f"loss {format_loss(metrics['train/loss'])}")
        if self.evaluation:
            parts.append(self.evaluation)
        return "  ".join(parts)


def bar_columns(steps: int) -> tuple[ProgressColumn, ...]:
    """The bar's columns. Its own fields keep their width (a step count, two clock times); only the step's
    text after them is cut, with an ellipsis, to fit the terminal (80 columns included)."""
    digits = len(str(steps))

    def fixed(width: int) -> Column:
        return Column(no_wrap=True, min_width=width)

    return (
        TextColumn("[bold]train", table_column=fixed(5)),
        BarColumn(bar_width=10, table_column=fixed(10)),
        MofNCompleteColumn(table_column=fixed(2 * digits + 1)),
        TimeElapsedColumn(table_column=fixed(7)),
        TextColumn("eta", table_column=fixed(3)),
        TimeRemainingColumn(table_column=fixed(7)),
        TextColumn(
            "{task.fields[info]}",
            table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=0),
        ),
    )


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


class LogLines:
    """One line every `interval` steps and at the last: `step 5/20  reward ...  elapsed 0:00:12  eta ...`.
    The ETA is the mean time of the steps seen so far times the steps left."""

    def __init__(self, console: Console, steps: int, interval: int) -> None:
        self.console, self.steps, self.interval = console, steps, interval
        self.text = StepLine()
        self.start = time.monotonic()
        self.first: tuple[int, float] | None = None  # (step, time) of the first step reported

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        now = time.monotonic()
        info = self.text(step, metrics)
        if self.first is None:
            self.first = (step, now)
        if step == 0 or (step % self.interval and step != self.steps):
            return
        first_step, first_time = self.first
        if step >= self.steps:
            eta = _clock(0)
        elif step > first_step:
            eta = _clock((now - first_time) / (step - first_step) * (self.steps - step))
        else:
            eta = "?"  # the first step seen (of a resumed run): no step time yet
        self.console.print(
            f"step {step}/{self.steps}  {info}  elapsed {_clock(now - self.start)}  eta {eta}",
            highlight=False,
            soft_wrap=True,
        )
        self.console.file.flush()


@contextmanager
def train_view(console: Console, steps: int, interval: int, *, resumed: bool) -> Iterator[OnStep]:
    """The `progress` callback of a training run, shown on `console` as its kind of output allows."""
    starting = "resuming from the newest checkpoint" if resumed else "evaluating the starting policy"
    if not console.is_terminal:
        console.print(f"train: {steps} steps; {starting}", highlight=False, soft_wrap=True)
        yield LogLines(console, steps, interval)
        return
    line = StepLine()
    with Progress(*bar_columns(steps), console=console, transient=False) as bar:
        task = bar.add_task("train", total=steps, info=starting)

        def on_step(step: int, metrics: dict[str, float]) -> None:
            bar.update(task, completed=step, info=line(step, metrics))

        yield on_step
