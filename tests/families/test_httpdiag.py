"""The httpdiag family: generated, split, fixed by its scripted expert from the logs, graded by the
pristine service replaying the clients' requests; over-wide limits and other edits earn nothing."""

from __future__ import annotations

import json

from trialground.families.experts import expert_share
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader


def test_generated_deterministic_and_split() -> None:
    train = load_source("httpdiag", n=40)
    assert [t.id for t in train] == [t.id for t in load_source("httpdiag", n=40)]
    assert {t.metadata["fault"] for t in train} == {"prefix", "auth", "body", "timeout"}
    evals = load_source("httpdiag", n=10, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}


async def test_expert_passes_careless_fixes_fail() -> None:
    tasks = load_source("httpdiag", n=12, seed=1)
    share = await expert_share(tasks)
    assert share.solved == 12, share
    task = next(t for t in tasks if t.metadata["fault"] in ("body", "timeout"))
    config = json.loads(task.files["config.json"])
    wide = dict(config, max_body_bytes=10**9, handler_timeout_ms=10**9)
    other = dict(json.loads(task.reference or ""), workers=config["workers"] + 1)
    grader = make_grader(SandboxConfig())
    try:
        assert (await grader.grade(task, task.reference or "")).verdict.passed
        for text in (json.dumps(wide), json.dumps(other), "{}", "not json"):
            verdict = (await grader.grade(task, text)).verdict
            assert not verdict.passed and verdict.error is None, text
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("httpdiag", n=2, seed=3)
    names = ("exit_at_import", "print_pass", "shadow_stdlib", "solution_symlink", "background_killer")
    report = await audit_tasks([("httpdiag", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
