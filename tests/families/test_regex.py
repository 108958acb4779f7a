"""The regex family: generated, split, graded on the workspace's text and a hidden one, solved by its
scripted expert; patterns that list the visible items, match too much or do not compile earn nothing."""

from __future__ import annotations

import re

from trialground.families.experts import expert_share
from trialground.families.regex.expert import solve
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader

KINDS = {"ipv4", "date", "email", "color", "time", "version"}


def test_generated_deterministic_and_split() -> None:
    train = load_source("regex", n=40)
    assert [t.id for t in train] == [t.id for t in load_source("regex", n=40)]
    assert {t.metadata["template"] for t in train} == KINDS
    evals = load_source("regex", n=15, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(solve(t) is not None for t in train)


async def test_reference_and_expert_pass_hostile_patterns_fail() -> None:
    tasks = load_source("regex", n=8, seed=2)
    share = await expert_share(tasks)
    assert share.solved == 8, share
    task = tasks[0]
    text = task.files["text.txt"]
    visible = [m.group(0) for m in re.finditer(task.reference.rstrip("\n"), text)]  # type: ignore[union-attr]
    hostile = {
        "the visible items listed": "|".join(
            re.escape(v) for v in sorted(set(visible), key=len, reverse=True)
        ),
        "too loose": r"\S+",
        "matches something else": r"(a|aa)*b",
        "does not compile": "(",
        "empty": "",
    }
    grader = make_grader(SandboxConfig())
    try:
        assert (await grader.grade(task, task.reference or "")).verdict.passed
        for label, pattern in hostile.items():
            verdict = (await grader.grade(task, pattern)).verdict
            assert not verdict.passed and verdict.error is None, label
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("regex", n=2, seed=4)
    names = ("exit_at_import", "print_pass", "delete_tests", "solution_symlink", "background_killer")
    report = await audit_tasks([("regex", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
