"""`trialground tasks list|show|export|validate|audit|expert SOURCE`.

SOURCE is any spec `trialground.tasks.sources.load_source` accepts (codegen, humaneval,
reasoning_gym:<dataset>, math, math:FILE, data, ops, FILE.jsonl, DIR), or `-`: JSONL tasks on standard
input. Every command that prints a result takes `--json` (JSON on stdout, nothing else there). Bad
input (unknown source, broken task file, unknown id) prints one clear line on stderr and exits 2.

`validate` loads the tasks here and hands them to the verify component:
`trialground.verify.validate.run_validation(tasks, *, source, runs, eval_tasks, eval_name, json_report,
as_json)` prints its table (or with `as_json` the report as JSON), writes the JSON report and returns the
exit status (0: every task valid).

`expert` runs the scripted expert of repository tasks (`trialground.rollout.swe_expert`) on each task
through the tool environment and prints the share the grader passed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

from trialground.cli.audit_cmd import audit
from trialground.cli.common import EXIT_USAGE, STDIN, err_console, fail, load_tasks
from trialground.errors import TaskError
from trialground.tasks.model import Task
from trialground.tasks.verifiers import repository_task

app = typer.Typer(help="Task sources: list, show, export, validate and audit tasks.", no_args_is_help=True)
app.command("audit")(audit)

SourceArg = Annotated[
    str,
    typer.Argument(
        help="codegen, humaneval, reasoning_gym:<name>, math[:FILE], hf:PATH[?MAPPING], data, ops, agent, "
        "longctx, swe:<repo>, FILE.jsonl, DIR, a plugin package.module:NAME[:ARG], or - (JSONL tasks on "
        "standard input)"
    ),
]
SeedOpt = Annotated[int, typer.Option(help="Seed of generated sources")]
NOpt = Annotated[int | None, typer.Option("--n", "-n", help="Number of tasks (generators: how many to make)")]
SplitOpt = Annotated[
    str | None, typer.Option(help="train or eval (default: generators train, files as stored)")
]


def _load(source: str, seed: int, n: int | None, split: str | None) -> list[Task]:
    if split not in (None, "train", "eval"):
        fail(f"--split must be train or eval, got {split!r}", EXIT_USAGE)
    chosen: Literal["train", "eval"] | None = split  # type: ignore[assignment]
    try:
        with err_console.status(f"loading {source} ..."):
            return load_tasks(source, seed=seed, n=n, split=chosen)
    except TaskError as e:
        fail(str(e), EXIT_USAGE)


def _head(text: str, width: int = 70) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


@app.command("list")
def list_tasks(
    source: Annotated[
        str | None,
        typer.Argument(help="A task source (see `tasks show`); left out: the registered sources themselves"),
    ] = None,
    seed: SeedOpt = 0,
    n: NOpt = None,
    split: SplitOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line instead of a table")
    ] = False,
) -> None:
    """A table of the source's tasks: id, domain, split, verifier and the head of the prompt; without a
    source, the registered sources (name, argument, generated or fixed, default size, what they hold)."""
    if source is None:
        _list_sources(as_json)
        return
    tasks = _load(source, seed, n, split)
    if as_json:
        for t in tasks:
            row = {"id": t.id, "domain": t.domain, "split": t.split, "verifier": t.verifier.kind}
            print(json.dumps({**row, "name": t.metadata.get("name"), "prompt": _head(t.prompt, 200)}))
        return
    table = Table(title=f"{source}: {len(tasks)} tasks", show_lines=False)
    for col in ("id", "domain", "split", "verifier", "prompt"):
        table.add_column(col, overflow="fold" if col == "prompt" else "ellipsis", no_wrap=col != "prompt")
    for t in tasks:
        table.add_row(t.id, t.domain, t.split, t.verifier.kind, _head(t.prompt))
    Console().print(table)


def _find(tasks: list[Task], key: str) -> Task:
    exact = [t for t in tasks if t.id == key or t.metadata.get("name") == key]
    if exact:
        return exact[0]
    prefixed = [t for t in tasks if t.id.startswith(key)]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        fail(f"id prefix {key!r} matches {len(prefixed)} tasks; give more characters", EXIT_USAGE)
    fail(
        f"no task {key!r} in this source (ids are content hashes; see `trialground tasks list` and pass the "
        "same --n/--seed/--split)",
        EXIT_USAGE,
    )


@app.command("show")
def show(
    source: SourceArg,
    task_id: Annotated[str, typer.Argument(help="Task id, unique id prefix, or name (e.g. HumanEval/0)")],
    seed: SeedOpt = 0,
    n: NOpt = None,
    split: SplitOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The task as one line of JSON (default: indented JSON)")
    ] = False,
) -> None:
    """One task as JSON (every field, checks included)."""
    task = _find(_load(source, seed, n, split), task_id)
    print(json.dumps(task.model_dump(mode="json"), indent=None if as_json else 2, ensure_ascii=False))


@app.command("export")
def export(
    source: SourceArg,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="FILE.jsonl, or a directory (one task directory each)")
    ],
    seed: SeedOpt = 0,
    n: NOpt = None,
    split: SplitOpt = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="hf: a Hugging Face dataset (save_to_disk DIR, or OUT.parquet) that hf:OUT reads"
        ),
    ] = None,
) -> None:
    """Write the source's tasks as JSONL (or in the directory form when OUT does not end in .jsonl), or
    with --format hf as a Hugging Face dataset."""
    from trialground.tasks.io import write_jsonl, write_task_dirs

    if fmt not in (None, "hf"):
        fail(f"--format must be hf (or left out: JSONL / task directories), got {fmt!r}", EXIT_USAGE)
    tasks = _load(source, seed, n, split)
    try:
        if fmt == "hf":
            from trialground.tasks.hf_source import write_hf

            if out.exists() and (not out.is_dir() or any(out.iterdir())):
                fail(f"{out}: exists (and is not an empty directory)", EXIT_USAGE)
            write_hf(tasks, out)
        elif out.suffix == ".jsonl":
            write_jsonl(tasks, out)
        else:
            if out.exists() and any(out.iterdir()):
                fail(f"{out}: directory exists and is not empty", EXIT_USAGE)
            write_task_dirs(tasks, out)
    except (OSError, TaskError) as e:
        fail(f"cannot write {out}: {e}", EXIT_USAGE)
    err_console.print(f"wrote {len(tasks)} tasks to {out}")


@app.command("from-failures")
def from_failures(
    file: Annotated[
        Path, typer.Argument(help="JSONL of recorded failed interactions (- reads standard input)")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="FILE.jsonl to write the tasks to")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per task (id, origin, failure_record) on stdout")
    ] = False,
    against: Annotated[
        list[str] | None,
        typer.Option("--against", help="A task source the candidates must not repeat (repeatable)"),
    ] = None,
    check: Annotated[
        bool,
        typer.Option("--check/--no-check", help="Validate and audit the candidates; keep the sound ones"),
    ] = False,
    seed: SeedOpt = 0,
    n: NOpt = None,
) -> None:
    """Turn recorded failed interactions (a prompt, or an OpenAI-format chat log with its outcome) into
    tasks with provenance (trialground.tasks.failures); with --against and --check, duplicates of the pool,
    invalid and hackable candidates are dropped, each with its reason (trialground.verify.intake). A run puts
    them in its regression queue with --set 'tasks.regression_files=[OUT]'."""
    from trialground.tasks.failures import tasks_from_failures
    from trialground.tasks.io import write_jsonl

    if out.suffix != ".jsonl":
        fail(f"--out must end in .jsonl, got {out}", EXIT_USAGE)
    try:
        tasks = tasks_from_failures(file)
    except TaskError as e:
        fail(str(e), EXIT_USAGE)
    pool = [t for spec in against or [] for t in _load(spec, seed, n, None)]
    if pool or check:
        import asyncio

        from trialground.verify.intake import admit

        tasks, dropped = asyncio.run(admit(tasks, pool=pool, validate=check, audit=check))
        for tid, why in dropped:
            err_console.print(f"dropped {tid}: {why}", highlight=False)
    try:
        write_jsonl(tasks, out)
    except (OSError, TaskError) as e:
        fail(f"cannot write {out}: {e}", EXIT_USAGE)
    for t in tasks:
        origin, line = t.metadata.get("origin"), t.metadata.get("failure_record")
        if as_json:
            print(json.dumps({"id": t.id, "origin": origin, "failure_record": line}))
        else:
            print(f"{t.id}\t{origin}\tline {line}")
    err_console.print(f"wrote {len(tasks)} tasks to {out}")


@app.command("validate")
def validate(
    source: SourceArg,
    runs: Annotated[int, typer.Option(min=1, max=100, help="Times the reference runs (flaky checks)")] = 3,
    json_report: Annotated[
        Path | None, typer.Option("--json-report", help="Write the report as JSON here")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON on stdout instead of the table")
    ] = False,
    eval_set: Annotated[
        str | None, typer.Option("--eval-set", help="Source to check overlap against")
    ] = None,
    seed: SeedOpt = 0,
    n: NOpt = None,
    split: SplitOpt = None,
) -> None:
    """Check every task: the reference passes N times identically, trivial and hack submissions fail,
    gold answers parse, enough tests; duplicates and eval-set overlap. Exit 1 when a task is invalid."""
    if source.strip() == STDIN and eval_set is not None and eval_set.strip() == STDIN:
        fail("SOURCE and --eval-set cannot both be - (standard input is read once)", EXIT_USAGE)
    tasks = _load(source, seed, n, split)
    # The eval split of the named set (generators make it on request); a set without one counts whole.
    if not eval_set:
        eval_tasks: list[Task] = []
    elif eval_set.strip() == STDIN:  # read once: its eval tasks, else all of them
        every = _load(eval_set, seed, None, None)
        eval_tasks = [t for t in every if t.split == "eval"] or every
    else:
        eval_tasks = _load(eval_set, seed, None, "eval") or _load(eval_set, seed, None, None)
    try:
        from trialground.verify.validate import run_validation
    except ImportError as e:
        fail(f"`trialground tasks validate` is not built yet (trialground.verify.validate: {e})", EXIT_USAGE)
    code = run_validation(
        tasks, source=source, runs=runs, eval_tasks=eval_tasks, eval_name=eval_set, json_report=json_report,
        as_json=as_json,
    )  # fmt: skip
    sys.exit(int(code))


@app.command("expert")
def expert(
    source: SourceArg,
    json_report: Annotated[
        Path | None, typer.Option("--json-report", help="Write the per-task results as JSON here")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON on stdout (progress on stderr)")
    ] = False,
    max_edits: Annotated[int, typer.Option(min=1, help="Candidate edits the expert tries per task")] = 60,
    seed: SeedOpt = 0,
    n: NOpt = None,
    split: SplitOpt = None,
) -> None:
    """Solve repository tasks (swe:<repo>) with the scripted expert, through the environment's tools only
    (run_tests, read_file, search, read_lines, edit_file, bash), or the tasks of a family with a scripted
    expert (`trialground.families.experts`); graded by the real grader; prints the solve share. Exit 1 when
    it solves none."""
    import asyncio

    from trialground.rollout.swe_expert import Expert, ExpertResult, run_expert

    tasks = _load(source, seed, n, split)
    if tasks and not any(repository_task(t.verifier.kind) for t in tasks):
        _family_expert(source, tasks, json_report, as_json)
    if not tasks or not all(repository_task(t.verifier.kind) for t in tasks):
        fail(f"{source}: the expert solves repository tasks (swe:<repo>) only", EXIT_USAGE)
    out = err_console if as_json else Console()

    def show_one(task: Task, r: ExpertResult) -> None:
        how = r.solved_by.description if r.solved_by else (r.error or "no edit passed")
        out.print(
            f"{'solved' if r.passed else 'failed'}  {task.metadata.get('name', task.id)}  "
            f"{len(r.tried)} edits, {r.turns} turns, {r.wall_s:.0f} s  {how}",
            highlight=False,
        )

    report = asyncio.run(run_expert(tasks, source=source, expert=Expert(max_edits), on_result=show_one))
    if as_json:
        print(json.dumps(report.as_dict()))
    out.print(
        f"{source}: solved {report.solved} of {len(report.results)} ({report.share:.0%}) in "
        f"{report.wall_s:.0f} s",
        highlight=False,
    )
    if json_report is not None:
        json_report.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    sys.exit(0 if report.solved else 1)


def _family_expert(source: str, tasks: list[Task], json_report: Path | None, as_json: bool) -> None:
    """The solve share of a family's scripted expert (`trialground.families.experts`); exits."""
    import asyncio

    from trialground.families.experts import expert_for, expert_share

    if any(expert_for(t) is None for t in tasks):
        fail(
            f"{source}: the expert solves repository tasks (swe:<repo>) only, or a family with a scripted "
            "expert (trialground.families.experts)",
            EXIT_USAGE,
        )
    share = asyncio.run(expert_share(tasks))
    row = {"source": source, "tasks": share.tasks, "solved": share.solved, "share": share.share,
           "unrecognised": share.unrecognised, "failed": list(share.failed_ids)}  # fmt: skip
    if as_json:
        print(json.dumps(row))
    else:
        print(f"{source}: the scripted expert solved {share.solved} of {share.tasks} ({share.share:.1%})")
    if json_report is not None:
        json_report.write_text(json.dumps(row, indent=2) + "\n")
    sys.exit(0 if share.solved else 1)


def _list_sources(as_json: bool) -> None:
    from trialground.tasks.sources import known

    rows = [
        {"name": s.name, "arg": s.arg, "generator": s.generator, "default_n": s.default_n, "doc": s.doc}
        for s in known()
    ]
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    table = Table(title=f"{len(rows)} task sources (plugins: package.module:NAME)")
    for col in ("source", "argument", "kind", "default n", "what"):
        table.add_column(col, overflow="fold")
    for r in rows:
        kind = "generated" if r["generator"] else "fixed"
        table.add_row(str(r["name"]), str(r["arg"]), kind, str(r["default_n"] or "-"), str(r["doc"]))
    Console(width=160).print(table)
