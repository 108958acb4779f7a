"""Repository tasks for a small policy (`swe:<repo>:<n>:brief`) and their demonstrations.

The statement keeps what locates the bug in a few lines; every demonstration, for every bug the catalogue
injects into the real inflection module, is one edit that restores the pristine file; and played through
the real tool environment (bwrap sandbox, the swe_tests grader) a demonstration is graded solved while its
wrong variant leaves the suite failing."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.orchestrator.run_config import load_config
from trialground.tasks.model import Task
from trialground.tasks.swe.brief import PAGE_LINES, brief_excerpt, demonstration
from trialground.tasks.swe.build import BugRecord
from trialground.tasks.swe.mutate import mutations
from trialground.verify.grader import make_grader

ROOT = Path(__file__).resolve().parents[2]
FULL = (
    "The `x` library (version 1) in /workspace has a bug: some of its own tests fail.\n\nFailing tests:\n"
    "- t.py::test_a\n\nThe first failure:\n```\nt.py:9: in test_a\n    assert f(2) == 3\n"
    "x/core.py:4: in f\n    return helper(n)\n           ^^^^^^^^^\nx/core.py:8: in helper\n"
    "    return n // 0\nE   ZeroDivisionError: integer division or modulo by zero\nE   more\n```\n\nFix it."
)


def test_the_brief_excerpt_keeps_the_test_frame_the_innermost_library_frame_and_the_error() -> None:
    assert brief_excerpt(FULL, ("x/",)) == (
        "t.py:9: in test_a\n    assert f(2) == 3\nx/core.py:8: in helper\n    return n // 0\n"
        "E   ZeroDivisionError: integer division or modulo by zero"
    )
    assert brief_excerpt("no excerpt here", ("x/",)) == ""


def test_brief_tasks_are_the_same_tasks_with_a_short_statement(swe_tasks: list[Task]) -> None:
    from trialground.tasks.sources import load_source

    brief = load_source("swe:inflection:3:brief")
    assert [t.metadata for t in brief] == [t.metadata for t in swe_tasks]
    for full, short in zip(swe_tasks, brief, strict=True):
        assert (short.split, short.verifier, short.files) == (full.split, full.verifier, full.files)
        assert len(short.prompt) < 700 < len(full.prompt)
        error = next(line for line in full.prompt.splitlines() if line.startswith("E "))
        assert error[:120] in short.prompt
        assert "python3 -I -S .tg/pytest.py test_inflection.py -q -x" in short.prompt
        assert f"{full.metadata['fail_to_pass']} of its tests fail" in short.prompt or (
            "1 of its tests fails" in short.prompt
        )


def test_every_catalogue_bug_of_inflection_gets_a_demonstration_that_restores_the_file(
    swe_tasks: list[Task],
) -> None:
    from trialground.tasks.swe.repos import repo_files, repo_spec

    spec = repo_spec("inflection")
    path = "inflection/__init__.py"
    pristine = repo_files(spec)[path]
    task = swe_tasks[0]
    made = wrong = 0
    bugs = mutations(path, pristine)
    for m in bugs:
        record = BugRecord(path, m.kind, m.line, m.description, m.text, ("t",), ("u",), "")
        demo = demonstration(spec, record, task, pristine)
        if demo is None:
            continue
        made += 1
        calls = dict(demo.expert)
        edit = calls["edit_file"]
        assert m.text.count(edit["old"]) == 1 and m.text.replace(edit["old"], edit["new"], 1) == pristine
        at = m.text[: m.text.index(edit["old"])].count("\n") + 1  # the edit's first line
        if "read_lines" in calls:  # the page read holds the edited line
            start = int(calls["read_lines"]["start"])
            assert start <= at < start + PAGE_LINES, (m.description, start, at)
            name = calls["search"]["pattern"].removeprefix("def ").rstrip("(")
            assert any(
                isinstance(n, ast.FunctionDef) and n.name == name and n.lineno <= at <= n.end_lineno
                for n in ast.walk(ast.parse(m.text))
            )
        else:  # a module-level bug: the search lists its line
            assert m.text.splitlines()[at - 1].lstrip().startswith(calls["search"]["pattern"])
        assert [name for name, _ in demo.expert][-2:] == ["bash", "submit"]
        if demo.wrong is not None:
            wrong += 1
            assert demo.wrong["old"] == edit["old"] and demo.wrong["new"] != edit["new"]
            assert m.text.replace(edit["old"], demo.wrong["new"], 1) != pristine
    assert made >= 0.8 * len(bugs) and wrong >= 0.25 * made, (made, wrong, len(bugs))


async def _play(task: Task, calls: list[tuple[str, dict[str, str]]]) -> tuple[list[str], bool]:
    cfg = load_config(ROOT / "examples" / "swe_cpu.yaml")
    grader = make_grader(cfg.sandbox, cfg.reward)
    env = ToolEnv(grader, cfg.env, cfg.sandbox)
    try:
        await env.reset(task)
        seen = []
        for name, args in calls:
            obs = await env.step(format_tool_call(name, args, "json_tags"))
            seen.append(obs.text)
            if obs.done:
                graded = obs.end.graded if obs.end is not None else None
                return seen, bool(graded is not None and graded.verdict.passed)
        return seen, False
    finally:
        await env.close()
        await grader.close()


@pytest.mark.slow
def test_a_demonstration_solves_its_task_through_the_tools_and_its_wrong_edit_does_not(
    swe_tasks: list[Task],
) -> None:
    from trialground.tasks.swe import demonstrations

    demos = [d for s in ("train", "eval") for d in demonstrations("inflection:3:brief", split=s)]
    assert demos, "no demonstration for the session's task set"
    demo = next((d for d in demos if d.wrong is not None), demos[0])
    assert demo.task.prompt.startswith("The `inflection` library in /workspace has a bug")
    seen, solved = asyncio.run(_play(demo.task, list(demo.expert)))
    assert solved, seen
    assert "passed" in seen[-2] and "failed" not in seen[-2]  # the suite's last line, as the check ran it
    if demo.wrong is not None:
        calls = [("edit_file", demo.wrong) if n == "edit_file" else (n, a) for n, a in demo.expert]
        seen, solved = asyncio.run(_play(demo.task, calls))
        assert not solved and ("failed" in seen[-2] or "error" in seen[-2]), seen
