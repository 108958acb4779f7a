"""The gitrepair family: generated, split, graded with real git on the workspace's repository and a hidden
one, solved by its scripted expert; scripts that write the visible state down, do nothing, or reconfigure
the repository earn nothing."""

from __future__ import annotations

import subprocess

from trialground.families.experts import expert_share
from trialground.families.gitrepair.expert import solve
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader

KINDS = {"conflict", "detached", "revert", "wrongbranch", "restore"}


def test_generated_deterministic_and_split() -> None:
    train = load_source("gitrepair", n=40)
    assert [t.id for t in train] == [t.id for t in load_source("gitrepair", n=40)]
    assert {t.metadata["template"] for t in train} == KINDS
    evals = load_source("gitrepair", n=15, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(solve(t) is not None for t in train)


def one_of_each(n: int = 30) -> list[Task]:
    picked: dict[str, Task] = {}
    for t in load_source("gitrepair", n=n, seed=3):
        picked.setdefault(str(t.metadata["template"]), t)
    assert set(picked) == KINDS
    return list(picked.values())


async def test_reference_and_expert_pass_hostile_scripts_fail(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tasks = one_of_each()
    share = await expert_share(tasks)
    assert share.solved == len(KINDS), share
    detached = next(t for t in tasks if t.metadata["template"] == "detached")
    (tmp_path / "make_repo.sh").write_text(detached.files["make_repo.sh"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["bash", "make_repo.sh"], cwd=tmp_path, capture_output=True, check=True, env=env)
    lost = subprocess.run(["git", "rev-parse", "HEAD@{1}"], cwd=tmp_path / "repo", capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    hostile = {
        "the visible commit id written down": f"git branch rescue {lost}\n",
        "nothing": "exit 0\n",
        "a filter configured": "git config filter.x.clean true\ngit branch rescue HEAD@{1}\n",
        ".git replaced by a gitfile": "mv .git ../other.git\necho 'gitdir: ../other.git' > .git\n"
        "git branch rescue HEAD@{1}\n",
    }
    grader = make_grader(SandboxConfig())
    try:
        assert (await grader.grade(detached, detached.reference or "")).verdict.passed
        for label, script in hostile.items():
            verdict = (await grader.grade(detached, "#!/bin/bash\n" + script)).verdict
            assert not verdict.passed and verdict.error is None, label
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("gitrepair", n=2, seed=4)
    names = ("exit_at_import", "print_pass", "delete_tests", "solution_symlink", "background_killer")
    report = await audit_tasks([("gitrepair", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
