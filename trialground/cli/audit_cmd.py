"""`trialground tasks audit SOURCE...`: the exploit library and the gold gate against each source's tasks,
graded by the real grader in real sandboxes (`trialground.verify.audit`).

Prints one row per family (tasks, moves graded, tasks paid, the strategies paid) and the tasks that were
paid or failed the gold gate; `--exclude-out` writes those tasks' ids for `tasks.exclude_files`; exits 1
when a family's paid share is above `--max-paid-rate` (or its gold-gate failures above
`--max-gold-fail-rate`), 2 on bad input.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trialground.cli.common import EXIT_USAGE, STDIN, err_console, fail, load_tasks
from trialground.errors import TaskError
from trialground.tasks.model import Task


def audit(
    sources: Annotated[list[str], typer.Argument(help="Task sources (any spec `tasks list` takes)")],
    n: Annotated[
        int, typer.Option("--n", "-n", min=1, help="Tasks per source (generators make this many)")
    ] = 8,
    seed: Annotated[int, typer.Option(help="Seed of generated sources")] = 0,
    split: Annotated[
        str, typer.Option(help="train or eval: the split audited (what trains: train)")
    ] = "train",
    strategies: Annotated[
        str | None, typer.Option(help="Comma-separated strategy names (default: the whole library)")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Gradings at once")] = 8,
    timeout_s: Annotated[float, typer.Option(min=1.0, help="Seconds one grading may take")] = 180.0,
    max_paid_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Highest share of a family's tasks that may be paid")
    ] = 0.0,
    max_gold_fail_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Highest share of a family's tasks failing the gold gate")
    ] = 0.0,
    exclude_out: Annotated[
        Path | None, typer.Option("--exclude-out", help="Write paid and unsound task ids here")
    ] = None,
    json_report: Annotated[
        Path | None, typer.Option("--json-report", help="Write the report as JSON")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of tables")
    ] = False,
) -> None:
    """Play the exploit library and the gold gate against every task's real grader; exit 1 above the
    thresholds."""
    from trialground.verify.audit import LIBRARY, audit_tasks
    from trialground.verify.audit.report import print_report

    if split not in ("train", "eval"):
        fail(f"--split must be train or eval, got {split!r}", EXIT_USAGE)
    chosen = LIBRARY
    if strategies:
        names = [s.strip() for s in strategies.split(",") if s.strip()]
        known = {s.name: s for s in LIBRARY}
        unknown = [s for s in names if s not in known]
        if unknown:
            fail(f"--strategies: unknown {', '.join(unknown)} (known: {', '.join(known)})", EXIT_USAGE)
        chosen = tuple(known[s] for s in names)
    if sum(s.strip() == STDIN for s in sources) > 1:
        fail("standard input (-) can be named once", EXIT_USAGE)
    loaded: list[tuple[str, list[Task]]] = []
    for spec in sources:
        try:
            with err_console.status(f"loading {spec} ..."):
                loaded.append((spec, load_tasks(spec, seed=seed, n=n, split=split)))  # type: ignore[arg-type]
        except TaskError as e:
            fail(str(e), EXIT_USAGE)
    total = sum(len(t) for _, t in loaded)
    done = [0]

    def progress(result: object) -> None:
        done[0] += 1
        err_console.print(f"audited {done[0]}/{total}", end="\r", highlight=False)

    report = asyncio.run(
        audit_tasks(loaded, strategies=chosen, concurrency=concurrency, timeout_s=timeout_s, on_task=progress)
    )
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = f"trialground tasks audit {' '.join(sources)} -n {n} --seed {seed} --split {split} ({when}, " \
             f"load {os.getloadavg()[0]:.1f})"  # fmt: skip
    if as_json:
        print(report.model_dump_json())
    else:
        print(header)
        print_report(report, Console(width=200))
    if json_report is not None:
        json_report.parent.mkdir(parents=True, exist_ok=True)
        json_report.write_text(json.dumps({"command": header, **report.model_dump(mode="json")}, indent=2))
    if exclude_out is not None:
        from trialground.tasks.exclude import write_excluded

        count = write_excluded(exclude_out, report.excluded(), header=header)
        err_console.print(f"wrote {count} task ids to {exclude_out} (name it in tasks.exclude_files)")
    over = report.over(max_paid_rate, max_gold_fail_rate)
    for line in over:
        err_console.print(f"audit failed: {line}", highlight=False)
    sys.exit(1 if over else 0)
