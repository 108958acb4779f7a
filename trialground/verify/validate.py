"""Task-set validation: is every task sound enough to train on?

Per task (graded with the real `Grader`, real sandboxes):
- the reference passes `runs` times with identical per-test results; a test whose outcome flips makes the
  task `quarantined` (flaky); a reference that fails makes it `invalid`;
- trivial and adversarial submissions earn nothing: code tasks get the empty module, `pass`, stubs that
  `return None` and echo their first argument, and the audit library's cheap code moves
  (`hack_submissions`); answer tasks get "", "I don't know" and an empty `\\boxed{}`; check-program tasks
  get the untouched workspace;
- gold answers parse (math: math-verify; numeric: a number; regex: compiles);
- code tasks have at least `min_tests` hidden tests and as many as `expected_tests` says;
- duplicates, near-duplicates and overlap with a named eval set (`trialground.tasks.dedup`) make the later
  task of each group `invalid`.

`run_validation` (the CLI entry point) prints a table, writes the JSON report and returns the exit status
(0: every task valid, 1: some task invalid or quarantined).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.verifiers import (
    CheckProgramParams,
    CodeTestsParams,
    MathParams,
    NumericParams,
    RegexParams,
    SweTestsParams,
)
from trialground.verify.audit.library import BY_NAME, VALIDATE
from trialground.verify.audit.strategy import CodeMove, functions_of
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader
from trialground.verify.kinds.answers import compile_pattern, parse_number
from trialground.verify.kinds.code_jobs import test_names
from trialground.verify.verdict import Verdict

Status = Literal["valid", "invalid", "quarantined"]


class TaskValidation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    name: str = ""
    kind: str
    status: Status
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = Field((), description="Findings that do not make the task invalid")
    flaky_tests: tuple[str, ...] = ()
    tests: int = 0


class ValidationReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    runs: int
    tasks: tuple[TaskValidation, ...]
    duplicates: tuple[dict, ...] = Field((), description="Dedup findings (trialground.tasks.dedup)")

    @property
    def ok(self) -> bool:
        return all(t.status == "valid" for t in self.tasks)

    def counts(self) -> dict[str, int]:
        out = {"valid": 0, "invalid": 0, "quarantined": 0}
        for t in self.tasks:
            out[t.status] += 1
        return out


def hack_submissions(functions: Sequence[str]) -> dict[str, str]:
    """The built-in adversarial set for a code task defining `functions`: the trivial submissions and the
    audit library's cheap code moves (`trialground.verify.audit.library.VALIDATE`)."""
    names = list(functions)
    out = {
        "empty": "",
        "pass": "pass\n",
        "return_none": CodeMove().render(names),
        "echo_input": CodeMove(body="    return args[0] if args else None\n").render(names),
    }
    for name in VALIDATE:
        code = BY_NAME[name].code
        assert code is not None, name
        out[name] = code.render(names)
    return out


def answer_trivia() -> dict[str, str]:
    return {"empty": "", "dont_know": "I don't know.", "empty_box": "\\boxed{}"}


class Validator:
    def __init__(self, grader: Grader, *, runs: int = 3, min_tests: int = 1, concurrency: int = 64) -> None:
        if grader.reward_config.grading.share_identical:
            raise ValueError(
                "the validator's repeated runs must each run: give it a grader with "
                "grading.share_identical off (validate_tasks does)"
            )
        self.grader, self.runs, self.min_tests = grader, runs, min_tests
        self._sem = asyncio.Semaphore(concurrency)

    async def _grade(self, task: Task, submission: str) -> Verdict:
        async with self._sem:
            return (await self.grader.grade(task, submission)).verdict

    async def validate(self, task: Task) -> TaskValidation:
        kind = task.verifier.kind
        problems: list[str] = []
        problems += await asyncio.to_thread(self._static_problems, task)  # math-verify blocks
        n_tests = 0
        if kind == "code_tests":
            n_tests = (
                sum(len(test_names(src)) for src in task.hidden_checks.values()) if task.hidden_checks else 0
            )
            declared = task.verifier.params_as(CodeTestsParams).expected_tests
            expected = n_tests if declared is None else declared
            if n_tests < self.min_tests:
                problems.append(f"only {n_tests} hidden tests (< {self.min_tests})")
            if expected != n_tests:
                problems.append(f"expected_tests={expected} but the checks define {n_tests}")
        elif kind == "check_program":
            n_tests = len(task.hidden_checks)
        elif kind == "swe_tests":
            swe = task.verifier.params_as(SweTestsParams)
            n_tests = len(swe.fail_to_pass) + len(swe.pass_to_pass)
        flaky: list[str] = []
        if task.reference is None:
            problems.append("no reference solution")
        else:
            refs = await asyncio.gather(*(self._grade(task, task.reference) for _ in range(self.runs)))
            errors = [v.error.message for v in refs if v.error is not None]
            if errors:
                problems.append(f"grading failed: {errors[0][:200]}")
            outcomes = [{t.name: t.outcome for t in v.tests} for v in refs]
            names = sorted({n for o in outcomes for n in o})
            flaky = [n for n in names if len({o.get(n) for o in outcomes}) > 1]
            passes = [v.passed for v in refs]
            if flaky or (any(passes) and not all(passes)):
                problems.append(
                    f"reference results differ between runs (flaky: {', '.join(flaky) or 'verdict'})"
                )
            elif not any(passes):
                detail = refs[0].detail
                problems.append(f"reference fails: {detail[:200]}")
        adversarial = self._adversarial(task)
        graded = await asyncio.gather(*(self._grade(task, s) for s in adversarial.values()))
        for label, verdict in zip(adversarial, graded, strict=True):
            if verdict.error is None and verdict.passed:
                problems.append(f"trivial/adversarial submission `{label}` passes")
        status: Status = (
            "quarantined" if flaky or any("differ between runs" in p for p in problems) else "valid"
        )
        if problems and status == "valid":
            status = "invalid"
        return TaskValidation(
            task_id=task.id,
            name=str(task.metadata.get("name", "")),
            kind=kind,
            status=status,
            problems=tuple(problems),
            flaky_tests=tuple(flaky),
            tests=n_tests,
        )

    def _adversarial(self, task: Task) -> dict[str, str]:
        kind = task.verifier.kind
        if kind == "code_tests":
            return hack_submissions(functions_of(task))
        if kind == "swe_tests":
            from trialground.tasks.swe.hostile import hostile_patches

            return hostile_patches(task)
        if kind == "check_program":
            path = task.verifier.params_as(CheckProgramParams).solution_path
            untouched = task.files.get(path, "") if path else ""
            return {"untouched_workspace": untouched, "empty": ""}
        return answer_trivia()

    def _static_problems(self, task: Task) -> list[str]:
        # The params models already require every gold answer and both swe test lists.
        kind, params = task.verifier.kind, task.verifier.typed_params
        if (
            kind == "numeric"
            and isinstance(params, NumericParams)
            and parse_number(str(params.answer)) is None
        ):
            return [f"gold answer {params.answer!r} is not a number"]
        if kind == "regex" and isinstance(params, RegexParams):
            try:
                compile_pattern(params.pattern, params.flags)
            except ValueError as e:
                return [f"regex does not compile (RE2 syntax): {e}"]
        if kind == "math" and isinstance(params, MathParams):  # the gold must verify against itself
            ok, detail = self.grader.resource("math").call(str(params.answer), f"${params.answer}$")
            if not ok:
                return [f"gold answer does not verify against itself: {detail}"]
        if kind in ("code_tests", "check_program", "swe_tests") and not task.hidden_checks:
            return ["no hidden checks"]
        return []


async def validate_tasks(
    tasks: Sequence[Task],
    *,
    runs: int = 3,
    eval_tasks: Sequence[Task] = (),
    eval_name: str = "eval",
    source: str = "",
    sandbox_config: SandboxConfig | None = None,
    reward_config: RewardConfig | None = None,
    concurrency: int = 64,
    min_tests: int = 1,
    progress: Progress | None = None,
) -> ValidationReport:
    """Validate every task (see module docstring); never raises for a bad task."""
    from trialground.tasks.dedup import find_duplicates

    reward = reward_config or RewardConfig()
    independent = reward.grading.model_copy(update={"share_identical": False})  # each run of a reference runs
    grader = make_grader(
        sandbox_config or SandboxConfig(), reward.model_copy(update={"grading": independent})
    )
    validator = Validator(grader, runs=runs, min_tests=min_tests, concurrency=concurrency)
    bar = progress.add_task("validating", total=len(tasks)) if progress is not None else None

    async def one(task: Task) -> TaskValidation:
        result = await validator.validate(task)
        if progress is not None and bar is not None:
            progress.advance(bar)
        return result

    try:
        results = list(await asyncio.gather(*(one(t) for t in tasks)))
    finally:
        await grader.close()
    findings = find_duplicates(tasks, eval_tasks, eval_name=eval_name)
    by_id = {t.id: t for t in tasks}
    positions: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        positions.setdefault(t.id, []).append(i)
    extra: dict[int, list[str]] = {}
    notes: dict[int, list[str]] = {}
    for f in findings:
        text = f"{f.kind}: {f.detail or ', '.join(f.task_ids)}"[:200]
        if f.kind == "same_task":  # identical content: every copy after the first
            marked = [p for tid in f.task_ids for p in positions.get(tid, [])[1:]]
        else:
            repeats = f.task_ids if f.kind == "eval_overlap" else f.task_ids[1:]
            marked = [p for tid in repeats for p in positions.get(tid, [])]
        first = by_id.get(f.task_ids[0])
        for p in marked:
            # Prompts equal only after dropping punctuation (HumanEval/56 vs /61: "<>" vs "()") are a
            # note, not a duplicate, when the raw prompts differ.
            same_raw = first is not None and " ".join(first.prompt.split()) == " ".join(
                tasks[p].prompt.split()
            )
            (notes if f.kind == "same_prompt" and not same_raw else extra).setdefault(p, []).append(text)
    final = []
    for p, r in enumerate(results):
        if p in extra:
            status: Status = "quarantined" if r.status == "quarantined" else "invalid"
            r = r.model_copy(update={"problems": r.problems + tuple(extra[p]), "status": status})
        if p in notes:
            r = r.model_copy(update={"warnings": tuple(notes[p])})
        final.append(r)
    return ValidationReport(
        source=source,
        runs=runs,
        tasks=tuple(final),
        duplicates=tuple(f.model_dump(mode="json") for f in findings),
    )


def print_report(report: ValidationReport, console: Console, *, all_rows: bool = False) -> None:
    rows = [t for t in report.tasks if all_rows or t.status != "valid"]
    table = Table(title=f"validation of {report.source or 'tasks'} ({report.runs} reference runs)")
    for col in ("task", "kind", "tests", "status", "problems"):
        table.add_column(col, overflow="fold")
    for t in rows:
        style = {"valid": "green", "invalid": "red", "quarantined": "yellow"}[t.status]
        table.add_row(
            t.name or t.task_id, t.kind, str(t.tests), f"[{style}]{t.status}[/]", "; ".join(t.problems)
        )
    if rows:
        console.print(table)
    c = report.counts()
    summary = f"{c['valid']} valid, {c['invalid']} invalid, {c['quarantined']} quarantined"
    console.print(f"{len(report.tasks)} tasks: {summary}")


def run_validation(
    tasks: Sequence[Task],
    *,
    source: str = "",
    runs: int = 3,
    eval_tasks: Sequence[Task] = (),
    eval_name: str | None = None,
    json_report: Path | str | None = None,
    concurrency: int = 64,
    as_json: bool = False,
) -> int:
    """CLI entry point: validate, print the table (stdout; with `as_json` the report as JSON instead), write
    the JSON report; 0 if all valid, else 1."""
    err = Console(stderr=True)
    with Progress(console=err, transient=True) as progress:
        report = asyncio.run(
            validate_tasks(
                tasks, runs=runs, eval_tasks=eval_tasks, eval_name=eval_name or "eval", source=source,
                concurrency=concurrency, progress=progress,
            )
        )  # fmt: skip
    if as_json:
        print(report.model_dump_json())
    else:
        print_report(report, Console(), all_rows=len(report.tasks) <= 50)
    if json_report is not None:
        Path(json_report).parent.mkdir(parents=True, exist_ok=True)
        Path(json_report).write_text(report.model_dump_json(indent=2))
    return 0 if report.ok else 1
