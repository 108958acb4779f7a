"""What `trialground train` prints as it runs: plain lines without a terminal, a bar that fits 80 columns."""

from __future__ import annotations

import io
import re

from rich.console import Console
from rich.progress import Progress

from trialground.cli.train_view import bar_columns, train_view

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def test_without_a_terminal_one_line_per_logging_interval() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80)  # a file: not a terminal
    with train_view(console, 20, 5, resumed=False) as on_step:
        on_step(0, {"eval/pass@1": 0.25})
        for step in range(1, 21):
            on_step(step, {"reward/mean": step / 20, "train/loss": -0.5})
    lines = out.getvalue().splitlines()
    assert lines[0] == "train: 20 steps; evaluating the starting policy"
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["5/20", "10/20", "15/20", "20/20"]
    assert re.fullmatch(
        r"step 10/20  reward 0\.500  loss -0\.5000  eval 25\.0% @ step 0  elapsed \d+:\d\d:\d\d  "
        r"eta \d+:\d\d:\d\d",
        steps[1],
    ), steps[1]


def test_the_bar_keeps_its_own_fields_whole_at_80_columns() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    with Progress(*bar_columns(200), console=console, auto_refresh=False) as bar:
        task = bar.add_task("train", total=200, info="reward 0.250  loss +2.36e-08  eval 36.7% @ step 150")
        bar.update(task, completed=123)
        bar.refresh()
    last = ANSI.sub("", out.getvalue().split("\r")[-1]).strip("\n")
    assert len(last) <= 80, last
    assert "123/200" in last and re.search(r"\d:\d\d:\d\d eta -:--:--", last), last
    assert last.startswith("train ") and "reward 0.250" in last, last


def test_a_resumed_runs_lines_count_from_where_it_resumed() -> None:
    out = io.StringIO()
    with train_view(Console(file=out, width=80), 7, 2, resumed=True) as on_step:
        on_step(7, {"reward/mean": 0.0})  # the one step left after a resume at step 6
    lines = out.getvalue().splitlines()
    assert lines[0] == "train: 7 steps; resuming from the newest checkpoint"
    assert lines[1].startswith("step 7/7  reward 0.000") and lines[1].endswith("eta 0:00:00"), lines
