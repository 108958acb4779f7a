"""The repair tools (`fixes`, `apply_fix`): spectrum-based localization in the sandbox, candidate edits on
the host, and the scripted player that uses them, end to end on real inflection tasks (bwrap sandboxes,
the real grader)."""

from __future__ import annotations

import asyncio

import pytest

from trialground.envs.config import EnvConfig
from trialground.envs.repair import (
    HOST_PARSE_MAX_BYTES,
    Fix,
    Localized,
    RepairMemo,
    changed_span,
    choose,
    list_fixes,
    rewrite,
)
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.envs.tools.registry import tool_docs
from trialground.rollout.swe_fixer import play_fixes
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.grader import make_grader

REPAIR_ENV = EnvConfig(
    kind="tool", max_turns=16, observation_budget_chars=2000, tool_timeout_s=120, repair_tools=True
)


def test_an_edit_is_shown_as_its_changed_words() -> None:
    assert changed_span("  x = m.group(2).upper()", "  x = m.group(1).upper()") == (
        "m.group(2)",
        "m.group(1)",
    )
    assert changed_span("  return plural[2:]", "  return plural[1:]") == ("plural[2:]", "plural[1:]")
    assert changed_span("    x = a - b", "    x = a + b") == ("x = a - b", "x = a + b")


def test_apply_fix_takes_a_listed_number_and_undoes_only_its_own_edit() -> None:
    a = Fix("m.py", 2, "one", "x = 1\ny = 2\n", "x = 1\ny = 3\n")
    b = Fix("m.py", 1, "two", "x = 1\ny = 2\n", "x = 0\ny = 2\n")
    memo = RepairMemo()
    assert "fixes() first" in str(choose(memo, "1"))
    memo.fixes = [a, b]
    assert choose(memo, "2") is b and choose(memo, " 1 ") is a
    assert "from 1 to 2" in str(choose(memo, "3")) and "from 1 to 2" in str(choose(memo, "x"))
    assert rewrite(memo, a, a.before) == a.after
    memo.applied = a
    assert rewrite(memo, b, a.after) == b.after  # a is undone, b applied
    assert rewrite(memo, b, "x = 1\ny = 9\n") is None  # changed by something else: left alone


def test_apply_fix_without_a_number_takes_the_candidate_after_the_last_applied() -> None:
    a = Fix("m.py", 2, "one", "x = 1\ny = 2\n", "x = 1\ny = 3\n")
    b = Fix("m.py", 1, "two", "x = 1\ny = 2\n", "x = 0\ny = 2\n")
    memo = RepairMemo()
    assert "fixes() first" in str(choose(memo, None))
    memo.fixes = [a, b]
    assert choose(memo, None) is a and choose(memo, " ") is a  # none applied yet: the first
    memo.applied = a
    assert choose(memo, None) is b
    memo.applied = b
    assert choose(memo, None) == "all 2 candidates of the last fixes() were applied"
    assert choose(memo, "1") is a  # a number still picks any of them


def test_the_host_parses_no_library_file_over_its_bound() -> None:
    big = "x = 1 + 2\n" * (HOST_PARSE_MAX_BYTES // 10 + 1)

    async def read(path: str) -> str | None:
        return big if path == "big.py" else "y = 3 - 4\n"

    fixes, skipped = asyncio.run(list_fixes([("big.py", 1), ("small.py", 1)], read))
    assert skipped == ["big.py"] and {f.path for f in fixes} == {"small.py"}
    assert "y = 3 + 4\n" in [f.after for f in fixes]


def test_the_tools_are_listed_only_when_asked() -> None:
    assert "fixes()" not in tool_docs(True, True) and "apply_fix(n?)" in tool_docs(False, False, True)


@pytest.mark.slow
@pytest.mark.timeout(900)  # every task played with six tries, then once more without numbers: real suites
def test_the_player_solves_a_real_task_with_the_listed_fixes_and_a_wrong_one_fails(
    swe_tasks: list[Task],
) -> None:
    config = SandboxConfig()

    async def episode(task: Task, **kw: object) -> dict[str, object]:
        grader = make_grader(config)
        env = ToolEnv(grader, REPAIR_ENV, config)
        try:
            return await play_fixes(env, task, **kw)  # type: ignore[arg-type]
        finally:
            await env.close()
            await grader.close()

    results = [(task, asyncio.run(episode(task, tries=6))) for task in swe_tasks]
    solved = [(task, r) for task, r in results if r["solved"]]
    assert solved, [(t.metadata["bug"], r["listed"], r["tried"]) for t, r in results]
    task, trace = solved[0]
    # the same strategy without numbers: the same candidates tried, the same verdict
    unnumbered = asyncio.run(episode(task, tries=6, next_fix=True))
    assert (unnumbered["solved"], unnumbered["tried"]) == (True, trace["tried"])
    applied = [call for call, _ in unnumbered["turns"] if '"apply_fix"' in call]
    assert len(applied) == trace["tried"] and all('"n"' not in call for call in applied)
    listing = trace["turns"][0][1]
    assert listing.startswith(f"{trace['listed']} fixes ") and task.metadata["bug_path"] in listing
    assert "tests passed" in trace["turns"][-2][1]  # the suite passed before submitting

    async def wrong_then_checks() -> None:
        grader = make_grader(config)
        env = ToolEnv(grader, REPAIR_ENV, config)
        try:
            await env.reset(task)
            await env.step(format_tool_call("fixes", {}))
            twin = (await env.fork(1))[0]  # the listing is part of the episode state: a fork can apply it
            try:
                applied = await twin.step(format_tool_call("apply_fix", {"n": str(trace["tried"])}))
                assert applied.text.startswith(f"applied fix {trace['tried']} at ")
            finally:
                await twin.close()
            wrong = trace["tried"] != 1  # candidate 1 failed the suite before the right one was found
            if wrong:
                await env.step(format_tool_call("apply_fix", {"n": "1"}))
            path = task.metadata["bug_path"]
            edited = await env.step(format_tool_call("write_file", {"path": path, "content": "x = 1\n"}))
            assert "wrote" in edited.text
            refused = await env.step(format_tool_call("apply_fix", {"n": "1"}))
            assert "changed since fixes()" in refused.text
            await env.step(format_tool_call("write_file", {"path": path, "content": task.files[path]}))
            if wrong:
                await env.step(format_tool_call("apply_fix", {"n": "1"}))
            end = await env.step(format_tool_call("submit", {}))
            assert end.done and end.end is not None and end.end.graded is not None
            assert not end.end.graded.verdict.passed
        finally:
            await env.close()
            await grader.close()

    asyncio.run(wrong_then_checks())


def test_fixes_needs_a_repository_task() -> None:
    from trialground.tasks.model import VerifierSpec

    task = Task(domain="qa", prompt="q", verifier=VerifierSpec(kind="numeric", params={"answer": 3}))
    config = SandboxConfig()

    async def run() -> str:
        grader = make_grader(config)
        env = ToolEnv(grader, REPAIR_ENV, config)
        try:
            await env.reset(task)
            return (await env.step(format_tool_call("fixes", {}))).text
        finally:
            await env.close()
            await grader.close()

    from trialground.sandbox.backends.bwrap.sandbox import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    assert "needs a repository task" in asyncio.run(run())


def test_localizations_are_kept_by_task_and_workspace_least_recently_used_first() -> None:
    from trialground.envs.repair import Localized, _Kept

    kept = _Kept(size=2)
    one, two, three = (Localized([("m.py", n)], 1, 1) for n in (1, 2, 3))
    kept.put(("t", "d1"), one)
    kept.put(("t", "d2"), two)
    assert kept.get(("t", "d1")) is one  # now the most recent
    kept.put(("u", "d1"), three)
    assert kept.get(("t", "d2")) is None and kept.get(("t", "d1")) is one and kept.get(("u", "d1")) is three


def test_a_malformed_localization_report_is_no_result() -> None:
    from trialground.envs.repair import parse_result

    good = 'noise\nTGLOC {"failed": 2, "passed": 5, "lines": [["m.py", 3, 1.0]]}\n'
    assert parse_result(good) == Localized([("m.py", 3)], 2, 5)
    for bad in ("", "TGLOC {", 'TGLOC {"error": "SystemExit"}', 'TGLOC {"lines": [[1]]}', "TGLOC []"):
        assert parse_result(bad) is None, bad


def test_a_call_that_runs_several_programs_ends_within_its_wall_limit() -> None:
    """run_tests with three checks of 2 s each under a 3 s tool limit: the programs share the limit, so
    the call ends as a failed tool call (the last check not run), not as a hung sandbox."""
    from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
    from trialground.tasks.model import VerifierSpec

    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    checks = {f"check_{i}.sh": "sleep 2\n" for i in range(3)}
    task = Task(
        domain="code",
        prompt="p",
        files={"solution.py": "x = 1\n"},
        visible_checks=checks,
        hidden_checks={"test_h.py": "def test_h():\n    assert True\n"},
        verifier=VerifierSpec(kind="code_tests", params={"solution_path": "solution.py"}),
    )
    config = SandboxConfig()
    env_config = EnvConfig(kind="tool", max_turns=4, tool_timeout_s=3, observation_budget_chars=2000)

    async def run() -> tuple[str, bool]:
        grader = make_grader(config)
        env = ToolEnv(grader, env_config, config)
        try:
            await env.reset(task)
            obs = await env.step(format_tool_call("run_tests", {}))
            return obs.text, obs.done
        finally:
            await env.close()
            await grader.close()

    text, done = asyncio.run(run())
    assert not done and "not run: run_tests used its 3 s" in text, text
