"""The stats family: generated, split, graded by tolerance on the workspace's data and a hidden file, solved
by its scripted expert (the reference passes in the audit's gold gate); scripts that print the visible
answer, a near miss or no number earn nothing."""

from __future__ import annotations

import subprocess
import sys

from trialground.families.experts import expert_share
from trialground.families.stats.expert import solve
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader

KINDS = {"welch", "cohen", "mannwhitney", "pearson", "slope", "spearman", "chisquare"}


def test_generated_deterministic_and_split() -> None:
    train = load_source("stats", n=40)
    assert [t.id for t in train] == [t.id for t in load_source("stats", n=40)]
    assert {t.metadata["template"] for t in train} == KINDS
    evals = load_source("stats", n=15, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(solve(t) is not None for t in train)


async def test_reference_and_expert_pass_hostile_scripts_fail(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tasks = load_source("stats", n=4, seed=2)
    share = await expert_share(tasks)
    assert share.solved == 4, share
    task = tasks[0]
    (tmp_path / "data.csv").write_text(task.files["data.csv"])
    (tmp_path / "analysis.py").write_text(task.reference or "")
    printed = subprocess.run([sys.executable, "analysis.py", "data.csv"], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
    value = float(printed)
    hostile = {
        "the visible answer written down": f"print({value!r})\n",
        "a near miss": (solve(task) or "").replace("print(", "print(1.001 * ", 1),
        "no number": "print('ok')\n",
        "nan": "print(float('nan'))\n",
    }
    grader = make_grader(SandboxConfig())
    try:
        for label, script in hostile.items():
            verdict = (await grader.grade(task, script)).verdict
            assert not verdict.passed and verdict.error is None, label
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("stats", n=1, seed=4)  # one task: its reference imports scipy, slow to load
    names = ("exit_at_import", "print_pass", "delete_tests", "solution_symlink", "background_killer")
    report = await audit_tasks([("stats", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [()]
    assert [t.gold_problems for t in report.tasks] == [()]  # the reference (scipy) passes, trivial fail
