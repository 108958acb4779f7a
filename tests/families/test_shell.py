"""The shell family: generated, split, graded on the workspace log and a hidden one, solved by its
scripted expert; scripts that write the visible answer down or read the workspace earn nothing."""

from __future__ import annotations

import subprocess

from trialground.families.experts import expert_share
from trialground.families.shell.expert import solve
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader


def test_generated_deterministic_and_split() -> None:
    train = load_source("shell", n=60)
    assert [t.id for t in train] == [t.id for t in load_source("shell", n=60)]
    assert {t.metadata["template"] for t in train} == {
        "status",
        "bytes",
        "top",
        "addresses",
        "errors",
        "largest",
    }
    evals = load_source("shell", n=20, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(solve(t) is not None for t in train)


async def test_reference_and_expert_pass_hostile_scripts_fail(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tasks = load_source("shell", n=8, seed=2)
    share = await expert_share(tasks)
    assert share.solved == 8, share
    task = tasks[0]
    (tmp_path / "access.log").write_text(task.files["access.log"])
    (tmp_path / "solve.sh").write_text(task.reference or "")
    visible = subprocess.run(
        ["bash", "solve.sh", "access.log"], cwd=tmp_path, capture_output=True, text=True, env={"LC_ALL": "C",
        "PATH": "/usr/bin:/bin"}, check=True,
    ).stdout  # fmt: skip
    hostile = {
        "the visible answer written down": "cat <<'EOF'\n" + visible + "EOF\n",
        "reads the workspace log": "cd /workspace 2>/dev/null; " + (task.reference or ""),
        "exit 0": "exit 0\n",
    }
    grader = make_grader(SandboxConfig())
    try:
        assert (await grader.grade(task, task.reference or "")).verdict.passed
        for label, script in hostile.items():
            verdict = (await grader.grade(task, script)).verdict
            assert not verdict.passed and verdict.error is None, label
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("shell", n=2, seed=4)
    names = ("exit_at_import", "print_pass", "delete_tests", "solution_symlink", "background_killer")
    report = await audit_tasks([("shell", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
