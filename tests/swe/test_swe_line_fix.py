"""Repairs written as a line-addressed `sed` command (`trialground.tasks.swe.line_fix`).

For every bug the catalogue injects into the real inflection module that has a line fix, that fix, run by
the real GNU `sed` on the buggy file, gives exactly the text `sed_line` predicts and a program equal to
the pristine one; the same fix one line lower, or at the next match, does not; and a demonstration that
repairs with it is graded solved through the real tool environment."""

from __future__ import annotations

import ast
import asyncio
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from trialground.tasks.model import Task
from trialground.tasks.swe.brief import demonstration
from trialground.tasks.swe.build import BugRecord
from trialground.tasks.swe.line_fix import LineFix, line_fix, sed_line
from trialground.tasks.swe.mutate import mutations

pytestmark = pytest.mark.skipif(shutil.which("sed") is None, reason="GNU sed is not installed")


def _real_sed(tmp_path: Path, text: str, command: str) -> str:
    target = tmp_path / "f.py"
    target.write_text(text)
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=60)
    return target.read_text()


@pytest.mark.parametrize(
    ("line", "fix"),
    [
        ("if a <= b and c // d | e:", LineFix(1, r" \/\/ ", " * ", 1)),
        ("x = f(a, b) + g(c, d)", LineFix(1, r"\(([^,()]+), ([^,()]+)", r"(\2, \1", 2)),
        ("y = w[2] + v[12] + u[2]", LineFix(1, r"\b2\b", "1", 2)),
        ("z = p & q if r else s", LineFix(1, r" & ", r" \&\/\\ ", 1)),  # sed's escaped &, / and \
        ("while x or y:", LineFix(1, r"\b(if|elif|while) ", r"\1 not ", 1)),
    ],
)
def test_sed_line_computes_what_gnu_sed_does(tmp_path: Path, line: str, fix: LineFix) -> None:
    text = f"first = 1\n{line}\nlast = 2\n"
    at_two = LineFix(2, fix.pattern, fix.replacement, fix.k)
    assert _real_sed(tmp_path, text, at_two.command("f.py")) == sed_line(text, at_two) != text


def test_every_fitting_catalogue_bug_of_inflection_is_repaired_by_real_sed(
    tmp_path: Path, swe_tasks: list[Task]
) -> None:
    from trialground.tasks.swe.repos import repo_files, repo_spec

    spec = repo_spec("inflection")
    path = "inflection/__init__.py"
    pristine = repo_files(spec)[path]
    want = ast.dump(ast.parse(pristine))
    fitted: Counter[str] = Counter()
    bugs = mutations(path, pristine)
    for m in bugs:
        fix = line_fix(m.text, pristine, m.kind)
        if fix is None:
            continue
        fitted[m.kind] += 1
        command = fix.command("f.py")
        got = _real_sed(tmp_path, m.text, command)
        assert got == sed_line(m.text, fix), command
        assert ast.dump(ast.parse(got)) == want, (m.description, command)
        # the line number and the match index both matter
        assert sed_line(m.text, LineFix(fix.line + 1, fix.pattern, fix.replacement, fix.k)) != got
        assert sed_line(m.text, LineFix(fix.line, fix.pattern, fix.replacement, fix.k + 1)) != got
        record = BugRecord(path, m.kind, m.line, m.description, m.text, ("t",), ("u",), "")
        demo = demonstration(spec, record, swe_tasks[0], pristine, line_fixes=True)
        assert demo is not None and ("bash", {"command": fix.command(path)}) in demo.expert
        assert demo.wrong is None
    # the one-token kinds always fit; swap_args when its arguments hold no comma or parenthesis
    assert sum(fitted.values()) >= 0.6 * len(bugs), (fitted, len(bugs))
    assert {"off_by_one", "compare", "operator", "swap_args"} <= set(fitted), fitted


def test_a_change_of_more_than_one_line_or_of_another_kind_has_no_line_fix() -> None:
    buggy, pristine = "a = 1\nb = 2\n", "a = 0\nb = 1\n"
    assert line_fix(buggy, pristine, "off_by_one") is None
    assert line_fix("a = 2\n", "a = 1\n", "compare") is None  # no operator of the kind on the line
    assert line_fix("a = 2\n", "a = 1\n", "off_by_one") == LineFix(1, r"\b2\b", "1", 1)


@pytest.mark.slow
def test_a_line_fix_demonstration_solves_its_task_through_the_tools(swe_tasks: list[Task]) -> None:
    """A catalogue bug put into a real task's workspace, repaired by its demonstration's `sed` through the
    real environment: the grader runs the suite on the result and it passes."""
    from test_swe_brief import _play

    from trialground.tasks.swe.repos import repo_files, repo_spec

    spec = repo_spec("inflection")
    path = "inflection/__init__.py"
    pristine = repo_files(spec)[path]
    m = next(
        m for m in mutations(path, pristine) if m.kind == "off_by_one" and line_fix(m.text, pristine, m.kind)
    )
    base = swe_tasks[0]
    task = Task(**{**base.model_dump(), "id": "", "files": {**base.files, path: m.text}})
    record = BugRecord(path, m.kind, m.line, m.description, m.text, ("t",), ("u",), "")
    demo = demonstration(spec, record, task, pristine, line_fixes=True)
    assert demo is not None
    seen, solved = asyncio.run(_play(task, list(demo.expert)))
    assert solved, seen
    repair = [name for name, _ in demo.expert].index("bash")  # the sed, before the suite's run
    assert seen[repair] == "[exit 0]" and "passed" in seen[-2] and "failed" not in seen[-2], seen
