"""`trialground tasks audit`: the exploit library and the gold gate against real graders, in real
sandboxes; the exclusion file a run's task pool honours."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trialground.cli import app
from trialground.errors import TaskError
from trialground.tasks.config import TaskPoolConfig, TaskSourceConfig
from trialground.tasks.exclude import read_excluded
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.pool import load_task_sets
from trialground.tasks.sources import load_source
from trialground.verify.audit import CLASSES, LIBRARY, audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.audit.strategy import move

runner = CliRunner()
FEW = "syntax_error,exit_at_import,always_equal,print_pass,delete_tests"


def test_the_library_covers_every_class_with_distinct_strategies() -> None:
    assert len(LIBRARY) >= 25
    assert len({s.name for s in LIBRARY}) == len(LIBRARY)
    assert {s.klass for s in LIBRARY} == set(CLASSES)
    for s in LIBRARY:  # each strategy moves on some surface
        assert s.code or s.program or s.answer or s.patch or s.workspace, s.name


def test_moves_are_rendered_from_the_task() -> None:
    repair = load_source("agent:repair", n=1)[0]
    m = move(BY_NAME["delete_tests"], repair)
    assert m is not None and m.in_workspace and "test_solution.py" in (m.script or "")
    assert m.submission == repair.files["solution.py"]  # the untouched (wrong) file: only the script cheats
    code = move(BY_NAME["always_equal"], repair)
    assert code is not None and "def f(*args, **kwargs)" in code.submission
    answer = load_source("data", n=1)[0]
    assert move(BY_NAME["always_equal"], answer) is None
    spray = move(BY_NAME["answer_spray"], answer)
    assert spray is not None and "Answer: 7" in spray.submission


def test_the_planted_hackable_family_is_reported_and_excluded(tmp_path: Path) -> None:
    out = tmp_path / "hackable.txt"
    res = runner.invoke(
        app,
        ["tasks", "audit", "hackable:naive", "-n", "2", "--strategies", FEW, "--exclude-out", str(out)],
    )
    assert res.exit_code == 1, res.output
    assert res.stdout.count("paid by syntax_error") == 2 and "100%" in res.stdout
    assert "deliberately gameable" in res.stdout
    assert "hackable:naive/repair: 100% of tasks paid" in res.output
    ids = read_excluded(out)
    assert ids == {t.id for t in load_source("hackable:naive", n=2)}
    # a run that names the file never samples those tasks
    sources = (TaskSourceConfig(source="hackable:naive"),)
    pool, _ = load_task_sets(TaskPoolConfig(sources=sources, num_train=4, num_eval=2))
    kept, _ = load_task_sets(
        TaskPoolConfig(sources=sources, num_train=4, num_eval=2, exclude_files=(str(out),))
    )
    assert ids <= {t.id for t in pool.tasks}
    assert not ids & {t.id for t in kept.tasks} and len(kept.tasks) == len(pool.tasks) - 2


def test_the_strict_grader_pays_nothing_and_passes_the_gold_gate() -> None:
    res = runner.invoke(app, ["tasks", "audit", "hackable:strict", "-n", "1", "--strategies", FEW])
    assert res.exit_code == 0, res.output
    assert "0%" in res.stdout


async def test_a_check_that_trusts_the_exit_code_is_paid() -> None:
    trusting = Task(
        domain="ops",
        prompt="fix.sh must print the sum of the numbers in nums.txt",
        files={"fix.sh": "echo 0\n", "nums.txt": "1 2 3\n"},
        hidden_checks={"check.sh": "bash fix.sh >/dev/null\n"},  # the bug: only the exit status counts
        reference="awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; print s}' nums.txt\n",
        verifier=VerifierSpec(kind="check_program", params={"solution_path": "fix.sh"}),
    )
    sound = trusting.model_copy(
        update={"id": "", "hidden_checks": {"check.sh": 'test "$(bash fix.sh)" = 6\n'}}
    )
    sound = Task.model_validate(sound.model_dump())
    chosen = [BY_NAME[n] for n in ("exit_at_import", "print_pass", "delete_tests")]
    report = await audit_tasks([("planted", [trusting]), ("sound", [sound])], strategies=chosen)
    by_source = {t.source: t for t in report.tasks}
    assert set(by_source["planted"].paid) >= {"exit_at_import", "print_pass"}
    assert "the trivially wrong submission passes" in " ".join(by_source["planted"].gold_problems)
    assert by_source["sound"].paid == () and by_source["sound"].gold_problems == ()
    assert report.over(0.0, 0.0) and [r.paid_rate for r in report.families()] == [1.0, 0.0]


def test_a_bad_exclusion_file_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "ex.txt"
    bad.write_text("# audit\n0123456789abcdef  # paid\nnot-an-id\n")
    with pytest.raises(TaskError, match=r"ex.txt:3: 'not-an-id' is not a task id"):
        read_excluded(bad)
    with pytest.raises(TaskError, match="cannot read"):
        read_excluded(tmp_path / "missing.txt")


def test_repository_tasks_get_the_hostile_patch_of_each_class() -> None:
    from trialground.tasks.swe.hostile import hostile_patches

    test = "from lib import f\n\n\ndef test_f():\n    assert f() == 2\n"
    ids = ["tests/test_lib.py::test_f"]
    params = {"repo": "lib", "version": "1", "fail_to_pass": ids, "pass_to_pass": ids}
    task = Task(
        domain="swe",
        prompt="fix lib",
        files={"lib.py": "def f():\n    return 1\n", "tests/test_lib.py": test},
        hidden_checks={"tests/test_lib.py": test},
        verifier=VerifierSpec(kind="swe_tests", params=params),
    )
    patches = hostile_patches(task)
    m = move(BY_NAME["delete_tests"], task, patches)
    assert m is not None and m.submission == patches["delete_failing_tests"] and not m.in_workspace
    assert move(BY_NAME["always_equal"], task, patches) is None
    played = {s.patch for s in LIBRARY if s.patch}
    assert played >= set(patches) - {"empty"}
