"""`trialground verify TASKS --solutions SOLUTIONS.jsonl [--json] [--concurrency N]`.

TASKS is any source spec (`humaneval`, `codegen`, `FILE.jsonl`, `DIR`, ...) or `-` (JSONL tasks on standard
input); `--solutions -` reads the solutions from standard input (not both at once). Each solutions line is
`{"task_id": ..., "solution": "<full program or answer text>"}`; `task_id` is a task's id or its
`metadata.name` (e.g. `HumanEval/0`). Solutions are graded in parallel (at most `--concurrency` at once)
with the real `Grader`. With `--json`, stdout gets exactly one JSON object per solutions line, in input
order: task_id, passed, reward, outcome, flags (names), flag_evidence, tests (name/outcome/detail),
detail, error. Progress goes to stderr. Exit 2 on bad input, 3 when any grading hit an infrastructure
error (its line carries `error`), else 0.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trialground.cli.common import EXIT_INFRA, EXIT_USAGE, STDIN, err_console, fail, load_tasks
from trialground.errors import TaskError
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.io import STDIN_NAME, jsonl_rows
from trialground.tasks.model import Task
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.kinds.code_jobs import VISIBLE_PREFIX
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Facts, Rubric
from trialground.verify.verdict import Verdict


def read_solutions(path: Path) -> list[tuple[str, str]]:
    """(task_id, solution) of every line (`-`: standard input); a bad line exits 2 naming the file and
    line."""
    if str(path) != STDIN and not path.is_file():
        fail(f"{path}: no such file", EXIT_USAGE)
    out: list[tuple[str, str]] = []
    try:
        for where, _, row in jsonl_rows(path):
            if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
                fail(f"{where}: expected an object with a string task_id", EXIT_USAGE)
            if not isinstance(row.get("solution"), str):
                fail(f"{where}: field solution must be a string", EXIT_USAGE)
            out.append((row["task_id"], row["solution"]))
    except TaskError as e:  # not UTF-8, not JSON, unreadable: the message names the file and line
        fail(str(e), EXIT_USAGE)
    return out


def result_row(task_id: str, verdict: Verdict, reward: Reward) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "passed": verdict.passed,
        "reward": reward.total,
        "outcome": reward.outcome,
        "flags": sorted({f.name for f in verdict.flags if f.severity == "hack"}),
        "flag_evidence": [f.model_dump() for f in verdict.flags],
        "tests": [t.model_dump() for t in verdict.tests],
        "detail": verdict.detail,
        "error": verdict.error.model_dump() if verdict.error else None,
    }


async def grade_all(
    tasks: dict[str, Task], solutions: list[tuple[str, str]], concurrency: int, progress: Progress | None
) -> list[dict[str, Any]]:
    reward_config = RewardConfig()
    grader, rubric = make_grader(SandboxConfig(), reward_config), Rubric.from_config(reward_config)
    sem = asyncio.Semaphore(concurrency)
    bar = progress.add_task("verifying", total=len(solutions)) if progress else None

    async def one(task_id: str, solution: str) -> dict[str, Any]:
        async with sem:
            graded = await grader.grade(tasks[task_id], solution)
        verdict, reward = graded.verdict, rubric.score(Facts(graded=graded))
        if progress is not None and bar is not None:
            progress.advance(bar)
        return result_row(task_id, verdict, reward)

    try:
        return list(await asyncio.gather(*(one(t, s) for t, s in solutions)))
    finally:
        await grader.close()


def verify(
    tasks_spec: Annotated[
        str,
        typer.Argument(
            metavar="TASKS",
            help="Task source: humaneval, FILE.jsonl, DIR, ..., or - (JSONL on standard input)",
        ),
    ],
    solutions: Annotated[
        Path, typer.Option("--solutions", help="JSONL of {task_id, solution} (- reads standard input)")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per solution on stdout")] = False,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Gradings at once")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of generated sources")] = 0,
    n: Annotated[int | None, typer.Option("--n", "-n", help="Number of tasks of a generator")] = None,
) -> None:
    """Verify solutions against tasks: hidden tests, verifiers, hack detection and the composite reward."""
    if tasks_spec.strip() == STDIN and str(solutions) == STDIN:
        fail("TASKS and --solutions cannot both be - (standard input is read once)", EXIT_USAGE)
    try:
        loaded = load_tasks(tasks_spec, seed=seed, n=n)
    except TaskError as e:
        fail(str(e), EXIT_USAGE)
    by_key: dict[str, Task] = {}
    for t in loaded:
        by_key[t.id] = t
        name = t.metadata.get("name")
        if isinstance(name, str):
            by_key.setdefault(name, t)
    rows = read_solutions(solutions)
    unknown = sorted({tid for tid, _ in rows if tid not in by_key})
    if unknown:
        where = STDIN_NAME if str(solutions) == STDIN else solutions
        fail(f"{len(unknown)} unknown task id(s) in {where}: {', '.join(unknown[:5])}", EXIT_USAGE)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as progress:
        results = asyncio.run(grade_all(by_key, rows, concurrency, progress))
    if as_json:
        for r in results:
            print(json.dumps(r))
    else:
        table = Table(title=f"{len(results)} solutions")
        for col in ("task", "passed", "reward", "tests", "flags"):
            table.add_column(col)
        for r in results:
            hidden = [t for t in r["tests"] if not t["name"].startswith(VISIBLE_PREFIX)]
            ok = sum(t["outcome"] == "passed" for t in hidden)
            tests = f"{ok}/{len(hidden)}" if hidden else "-"
            table.add_row(r["task_id"], str(r["passed"]), f"{r['reward']:.3f}", tests, ", ".join(r["flags"]))
        Console().print(table)
        passed = sum(r["passed"] for r in results)
        Console().print(
            f"{passed}/{len(results)} passed, mean reward {_mean([r['reward'] for r in results]):.3f}"
        )
    errors = [r for r in results if r["error"]]
    if errors:
        fail(
            f"{len(errors)} grading(s) failed for infrastructure reasons: {errors[0]['error']['message']}",
            EXIT_INFRA,
        )


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0
