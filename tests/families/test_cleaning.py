"""The cleaning family: generated, split, graded on the workspace's raw file and a hidden one, solved by
its scripted expert; a script that copies the visible answer earns nothing."""

from __future__ import annotations

import csv
import io

from trialground.families.cleaning.source import expected
from trialground.families.experts import expert_share
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader


def test_generated_deterministic_and_split() -> None:
    train = load_source("cleaning", n=40)
    assert [t.id for t in train] == [t.id for t in load_source("cleaning", n=40)]
    evals = load_source("cleaning", n=10, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert len({t.metadata["key"] for t in train}) > 8  # the rules vary


async def test_reference_and_expert_pass_a_copied_answer_fails() -> None:
    tasks = load_source("cleaning", n=6, seed=1)
    share = await expert_share(tasks)
    assert share.solved == 6, share
    task = tasks[0]
    rules = json_rules(task.metadata["key"])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(expected(task.files["raw.csv"], rules))
    copy = f"import sys\nopen(sys.argv[2], 'w').write({buf.getvalue()!r})\n"
    grader = make_grader(SandboxConfig())
    try:
        assert (await grader.grade(task, task.reference or "")).verdict.passed
        verdict = (await grader.grade(task, copy)).verdict
        assert not verdict.passed and verdict.error is None and "hidden raw.csv" in verdict.tests[0].detail
    finally:
        await grader.close()


def json_rules(key: object) -> dict[str, str]:
    import json

    return dict(json.loads(str(key)))


async def test_audit_pays_nothing() -> None:
    tasks = load_source("cleaning", n=2, seed=3)
    names = ("exit_at_import", "print_pass", "always_equal", "solution_fifo", "shadow_stdlib")
    report = await audit_tasks([("cleaning", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
