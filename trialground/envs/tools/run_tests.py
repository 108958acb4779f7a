"""`run_tests()`: the task's visible checks. A task whose verifier kind names its `test_runs` (a
repository task) runs those: its failing tests and the rest of its suite, exactly as grading runs them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from trialground.envs.tools.base import Deadline, Tool, ToolCall, ToolCaps, ToolOutcome, render_exec
from trialground.errors import TaskError
from trialground.plugin import resolve
from trialground.tasks.verifiers import lookup

# The stdlib-only runner of pytest-style test files, a real module shipped into the sandbox as text.
VISIBLE_RUNNER = (Path(__file__).parent / "visible_runner.py").read_text()


class TestRun(Protocol):
    """One program of a repository task's test runs (`VerifierKind.test_runs`)."""

    @property
    def label(self) -> str: ...

    @property
    def argv(self) -> list[str]: ...


async def run(call: ToolCall) -> ToolOutcome:
    task, limits = call.box.task, call.limits
    runs_of = lookup(task.verifier.kind).test_runs
    if runs_of is not None:
        return await _run_repo_tests(call, resolve(runs_of, "test_runs", TaskError)(task))
    paths = sorted(task.visible_checks)
    if not paths:
        return ToolOutcome("this task has no visible tests", False)
    py = [p for p in paths if p.endswith(".py")]
    outputs: list[str] = []
    ok = True
    deadline = Deadline(limits)
    if py:
        res = await call.box.exec([call.box.python, "-B", "-c", VISIBLE_RUNNER, *py], limits)
        ok = ok and res.ok
        outputs.append(render_exec(res))
    for p in paths:
        if p.endswith(".py"):
            continue
        left = deadline.next()
        if left is None:
            ok = False
            outputs.append(f"{p}: not run: run_tests used its {limits.wall_s:g} s")
            continue
        res = await call.box.exec(["bash", p] if p.endswith(".sh") else [f"./{p}"], left)
        ok = ok and res.ok
        outputs.append(f"{p}: " + render_exec(res))
    return ToolOutcome("\n".join(outputs), ok)


async def _run_repo_tests(call: ToolCall, runs: Sequence[TestRun]) -> ToolOutcome:
    """Each run (its `label` and `argv`) in this sandbox, with grading's own environment."""
    outputs: list[str] = []
    ok = True
    failed = 0
    deadline = Deadline(call.limits)
    for one in runs:
        left = deadline.next()
        if left is None:  # out of time: the runs left are failed, not run
            ok = False
            failed += 1
            outputs.append(f"== {one.label}: FAILED\nnot run: run_tests used its {call.limits.wall_s:g} s")
            continue
        res = await call.box.exec(one.argv, left)
        ok = ok and res.ok
        failed += not res.ok
        text = render_exec(res)
        shown = text if not res.ok else text[:300]
        outputs.append(f"== {one.label}: {'passed' if res.ok else 'FAILED'}\n{shown}")
    # the verdict first: an observation cut to a small budget still shows it
    head = f"tests passed ({len(runs)} runs)" if ok else f"tests FAILED ({failed} of {len(runs)} runs)"
    return ToolOutcome("\n".join([head, *outputs]), ok)


TOOL = Tool(
    "run_tests",
    run,
    ToolCaps(runs_program=True),
    prompt="run the visible tests",
    description="Run the visible tests.",
    returns="One line per test and a summary.",
)
