"""The files-in, files-out families (one shared check program, `families/check_files.py`): each is
generated deterministically with disjoint splits, its reference and scripted expert pass the real grader,
a program that writes the workspace's answer down fails on the hidden inputs, and a few exploit strategies
of the audit earn nothing."""

from __future__ import annotations

import json

import pytest

from trialground.families.experts import expert_for, expert_share
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader

FAMILIES = ("depgraph", "jsonxform", "cron", "configfix", "csvjoin", "intervals")


def spec_of(task: Task) -> dict[str, object]:
    line = task.hidden_checks["check_files.py"].split("SPEC_JSON = ", 1)[1].split("\n", 1)[0]
    spec: dict[str, object] = json.loads(json.loads(line.rsplit("  # replaced", 1)[0]))
    return spec


def written_down(task: Task) -> str:
    """A program that reproduces the first case's expected output without computing it; where the answer
    is a file (nothing runs), the untouched file."""
    spec = spec_of(task)
    case = spec["cases"][0]  # type: ignore[index]
    want = case["want"]
    if not spec["run"]:
        return task.files[str(spec["solution"])]
    text = "\n".join(want) + "\n" if case["compare"] == "text" else json.dumps(want)
    if case["output"] == "-":
        return f"import sys\nsys.stdout.write({text!r})\n"
    return f"open({case['output']!r}, 'w').write({text!r})\n"


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_deterministic_and_split(family: str) -> None:
    train = load_source(family, n=30)
    assert [t.id for t in train] == [t.id for t in load_source(family, n=30)]
    evals = load_source(family, n=8, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(t.metadata["family"] == family and expert_for(t) is not None for t in train)


@pytest.mark.parametrize("family", FAMILIES)
async def test_reference_and_expert_pass_a_written_down_answer_fails(family: str) -> None:
    tasks = load_source(family, n=4, seed=1)
    share = await expert_share(tasks)
    assert share.solved == 4, share
    grader = make_grader(SandboxConfig())
    try:
        task = tasks[0]
        assert (await grader.grade(task, task.reference or "")).verdict.passed
        verdict = (await grader.grade(task, written_down(task))).verdict
        assert not verdict.passed and verdict.error is None, verdict
    finally:
        await grader.close()


@pytest.mark.parametrize("family", FAMILIES)
async def test_audit_pays_nothing(family: str) -> None:
    tasks = load_source(family, n=1, seed=3)
    names = ("exit_at_import", "print_pass", "always_equal", "solution_fifo", "background_killer")
    report = await audit_tasks([(family, tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [()]
    assert [t.gold_problems for t in report.tasks] == [()]
