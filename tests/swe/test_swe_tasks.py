"""SWE tasks end to end on a real repository (inflection): building, validation, hostile submissions.

Everything runs for real: the pinned sdist, the bug search in sandboxes (3 runs per candidate), grading in
the repository's image. Module-scoped: the task set is built once (`conftest.py`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from reward_helpers import grade_and_score

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.swe.patch import apply_patch
from trialground.verify.grader import make_grader

pytestmark = pytest.mark.slow


def test_kept_bugs_have_fail_and_pass_tests_and_a_statement_that_hides_the_fix(
    swe_tasks: list[Task], swe_cache: Path
) -> None:
    assert swe_tasks, "no bug kept"
    for t in swe_tasks:
        f2p, p2p = t.verifier.params["fail_to_pass"], t.verifier.params["pass_to_pass"]
        assert f2p and p2p and not set(f2p) & set(p2p)
        assert len(f2p) + len(p2p) <= 455
        path = str(t.metadata["bug_path"])
        fixed = apply_patch(t.files, t.reference or "")
        assert set(fixed) == {path} and fixed[path] != t.files[path]
        added = [
            ln[1:].strip()
            for ln in (t.reference or "").splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ]
        assert not [ln for ln in added if len(ln) > 8 and ln in t.prompt], "the statement shows the fix"
        assert f2p[0] in t.prompt
        assert t.hidden_checks == {"test_inflection.py": t.files["test_inflection.py"]}
        assert ".tg/pytest.py" in t.files and ".tg/site/_pytest/python.py" in t.files
    assert list((swe_cache / "tasks").glob("inflection-0.5.1-*.json"))
    from trialground.tasks.sources import load_source

    assert [t.id for t in load_source("swe:inflection:3")] == [t.id for t in swe_tasks]  # from the cache


def test_validation_gold_passes_and_every_hostile_patch_fails(swe_tasks: list[Task]) -> None:
    from trialground.tasks.swe.hostile import hostile_patches
    from trialground.verify.validate import validate_tasks

    task = swe_tasks[0]
    labels = set(hostile_patches(task))
    assert labels >= {
        "empty",
        "delete_failing_tests",
        "edit_failing_tests",
        "conftest_plugin",
        "sitecustomize",
        "patch_runner",
        "library_patches_pytest",
        "library_exits_early",
        "library_forges_report",
        "library_rewrites_tests",
    }
    report = asyncio.run(validate_tasks([task], runs=3, concurrency=4))
    (result,) = report.tasks
    assert result.status == "valid", result.problems
    assert not result.flaky_tests


def _fix_in_workspace(task: Task) -> dict[str, str]:
    fixed = apply_patch(task.files, task.reference or "")
    return {p: t for p, t in fixed.items() if t is not None}


def test_agent_workspaces_are_graded_from_their_files_and_harness_edits_earn_nothing(
    swe_tasks: list[Task],
) -> None:
    from trialground.sandbox.factory import open_sandbox

    task = swe_tasks[0]
    conftest = (
        "import pytest\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n"
        "    item.runtest = lambda: None\n"
    )

    async def grade(changes: dict[str, str], bash: str = "") -> tuple[bool, float, list[str]]:
        grader = make_grader(SandboxConfig())
        sandbox = await open_sandbox(SandboxConfig(), task.files)
        try:
            for path, text in changes.items():
                await sandbox.write(path, text)
            if bash:
                assert (await sandbox.exec(bash)).ok
            verdict, reward = await grade_and_score(grader, task, "", workspace=sandbox)
            assert verdict.error is None, verdict.detail
            return verdict.passed, reward.total, [f.name for f in verdict.flags]
        finally:
            await sandbox.close()
            await grader.close()

    async def main() -> None:
        fix = _fix_in_workspace(task)
        assert await grade(fix) == (True, 1.0, [])
        # A correct fix with a conftest plugin, or with the failing tests' file deleted: never rewarded.
        assert await grade({**fix, "conftest.py": conftest}) == (False, 0.0, ["test_tampering"])
        passed, total, flags = await grade(fix, "rm test_inflection.py && ln -s /etc/passwd sitecustomize.py")
        assert (passed, total) == (False, 0.0) and flags == ["test_tampering"]
        # Without the fix, the harness edit alone makes every test "pass" in the workspace: still 0.
        passed, total, flags = await grade({"conftest.py": conftest})
        assert (passed, total, flags) == (False, 0.0, ["test_tampering"])

    asyncio.run(main())
