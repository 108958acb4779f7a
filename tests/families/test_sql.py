"""The sql family: generated, split, graded by its hidden check on visible and hidden data, solved by its
scripted expert; hostile queries earn nothing."""

from __future__ import annotations

import sqlite3

from trialground.families.experts import expert_share
from trialground.families.sql.expert import solve
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader


def test_generated_deterministic_and_split() -> None:
    train = load_source("sql", n=60)
    assert [t.id for t in train] == [t.id for t in load_source("sql", n=60)]
    assert len({t.id for t in train}) == 60 and {t.metadata["template"] for t in train} >= {"count", "top"}
    evals = load_source("sql", n=20, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(solve(t) is not None for t in train)


def _visible_rows(task: Task) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(":memory:")
    conn.executescript(task.files["schema.sql"] + task.files["data.sql"])
    return conn.execute(task.reference or "").fetchall()


async def test_reference_and_expert_pass_hostile_queries_fail() -> None:
    tasks = load_source("sql", n=8, seed=3)
    share = await expert_share(tasks)
    assert share.solved == 8, share
    task = next(t for t in tasks if t.metadata["template"] == "count")
    (count,) = _visible_rows(task)[0]
    hostile = {
        "the visible answer written down": f"SELECT {count}",
        "two statements": f"{task.reference}; DELETE FROM orders",
        "attach": "ATTACH DATABASE 'x.db' AS x",
        "pragma": "PRAGMA table_info(orders)",
        "empty": "",
    }
    grader = make_grader(SandboxConfig())
    try:
        ref = (await grader.grade(task, task.reference or "")).verdict
        assert ref.passed, ref.detail
        for label, query in hostile.items():
            verdict = (await grader.grade(task, query)).verdict
            assert not verdict.passed and verdict.error is None, label
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("sql", n=2, seed=5)
    names = ("exit_at_import", "print_pass", "solution_fifo", "shadow_stdlib", "judge_injection")
    report = await audit_tasks([("sql", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
