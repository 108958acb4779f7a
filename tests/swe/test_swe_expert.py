"""The scripted expert solves a real repository task through the tool environment, and a wrong edit made
through the same tools earns nothing.

Real end to end: the inflection task set of `conftest.py` (bwrap sandboxes, the real grader), the expert
driving `ToolEnv` one tool call per turn."""

from __future__ import annotations

import asyncio

import pytest

from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.rollout.swe_expert import EXPERT_ENV, _edit_blocks, _quick_command, run_expert
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.swe.mutate import inverse_mutations, mutations
from trialground.verify.grader import make_grader


def test_inverse_edits_undo_the_catalogue_where_it_has_an_inverse() -> None:
    source = (
        "def span(xs, lo=0):\n"
        "    if not xs:\n"
        "        return 0\n"
        "    total = lo + len(xs) * 2\n"
        "    return max(total, lo) if total < 10 and lo >= 0 else divmod(total, 3)[1]\n"
    )
    undone = {m.kind: 0 for m in mutations("m.py", source)}
    for bug in mutations("m.py", source):
        fixes = inverse_mutations("m.py", bug.text, (bug.line, bug.line))
        undone[bug.kind] += any(f.text == source for f in fixes)
    assert undone["operator"] and undone["compare"] and undone["off_by_one"] and undone["swap_args"]
    assert undone["negate"]
    assert not undone.get("remove_guard") and not undone.get("drop_else")  # no inverse: unsolved


def test_edit_blocks_are_unique_and_the_quick_command_keeps_the_repository_args() -> None:
    old = "a = 1\nb = 2\nc = 1\nb = 2\n"
    assert _edit_blocks(old, old.replace("c = 1", "c = 0")) == ("c = 1\n", "c = 0\n")
    block, new = _edit_blocks(old, "a = 1\nb = 3\nc = 1\nb = 2\n")
    assert old.count(block) == 1 and old.replace(block, new) == "a = 1\nb = 3\nc = 1\nb = 2\n"
    prompt = (
        "Failing tests:\n- Tests/a_test.py::test_x\n\nFix it. Run the tests with: python3 -I -S "
        ".tg/pytest.py -o pythonpath=Lib Tests/misc -q -x"
    )
    assert _quick_command(prompt, ["Tests/a_test.py::test_x"]) == (
        "python3 -I -S .tg/pytest.py -o pythonpath=Lib -q -x --tb=short Tests/a_test.py::test_x"
    )


@pytest.mark.slow
def test_the_expert_solves_a_real_task_through_the_tools_and_a_wrong_edit_fails(
    swe_tasks: list[Task],
) -> None:
    config = SandboxConfig()
    solved = []
    for task in swe_tasks:  # until the first solved one (a dropped else branch has no inverse edit)
        report = asyncio.run(run_expert([task], source="swe:inflection:3", sandbox_config=config))
        assert report.share in (0.0, 1.0) and len(report.results) == 1
        if report.results[0].passed:
            solved.append((task, report.results[0]))
            break
    assert solved, [t.metadata["bug"] for t in swe_tasks]
    task, result = solved[0]
    assert result.solved_by is not None and result.solved_by.path == task.metadata["bug_path"]
    assert result.turns >= 5  # run_tests, read_file, edit_file, the named tests, run_tests, submit

    # A wrong edit, made through the same tools: an inverse edit away from the bug, which stays.
    path = result.solved_by.path
    buggy = task.files[path]
    wrong = next(m for m in inverse_mutations(path, buggy) if abs(m.line - result.solved_by.line) > 5)
    old, new = _edit_blocks(buggy, wrong.text)

    async def wrong_episode() -> bool:
        env = ToolEnv(make_grader(config), EXPERT_ENV, config)
        try:
            await env.reset(task)
            edited = await env.step(format_tool_call("edit_file", {"path": path, "old": old, "new": new}))
            assert edited.text.startswith("edited"), edited.text
            end = await env.step(format_tool_call("submit", {}))
            assert end.done and end.end is not None and end.end.graded is not None
            return end.end.graded.verdict.passed
        finally:
            await env.close()

    assert not asyncio.run(wrong_episode())
