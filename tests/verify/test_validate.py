"""Task-set validation: sound tasks pass; a wrong reference, a flaky test, weak tests and duplicates are
caught."""

from __future__ import annotations

import json

import pytest

from trialground.families.humaneval.source import humaneval_tasks
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.validate import hack_submissions, run_validation, validate_tasks

CHECKS = "from solution import add\n\n" + "".join(
    f"def test_{i}():\n    assert add({i}, {i + 1}) == {2 * i + 1}\n\n" for i in range(4)
)
FLAKY = "import os\nfrom solution import add\n\n" + "".join(
    f"def test_{i}():\n    assert os.urandom(1)[0] < 128\n\n" for i in range(4)
)


def add_task(
    reference: str = "def add(a, b):\n    return a + b\n", checks: str = CHECKS, prompt: str = "add"
) -> Task:
    return Task(
        domain="code",
        prompt=prompt,
        hidden_checks={"test_hidden.py": checks},
        reference=reference,
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 4}),
    )


def test_hack_set_covers_the_trivial_submissions() -> None:
    hacks = hack_submissions(["f"])
    assert {"empty", "pass", "return_none", "echo_input", "always_equal", "exit_at_import"} <= set(hacks)


async def test_broken_tasks_are_each_caught() -> None:
    good = add_task()
    wrong_ref = add_task("def add(a, b):\n    return a - b\n", prompt="add, but with a wrong reference")
    flaky = add_task(checks=FLAKY, prompt="add, with flaky tests")
    no_asserts = "from solution import add\n\n" + "".join(
        f"def test_{i}():\n    add(1, 2)\n\n" for i in range(4)
    )
    weak = add_task(checks=no_asserts, prompt="add, with tests that assert nothing")
    dup = good.model_copy(update={"metadata": {"name": "copy"}})  # same content: same id
    near = add_task(prompt="add ")  # a different id, but the same prompt once whitespace is normalised
    exact_answer = Task(
        domain="qa",
        prompt="2+2?",
        reference="4",
        verifier=VerifierSpec(kind="numeric", params={"answer": "4"}),
    )
    bad_gold = Task(
        domain="qa",
        prompt="3+3?",
        reference="6",
        verifier=VerifierSpec(kind="numeric", params={"answer": "six"}),
    )
    tasks = [good, wrong_ref, flaky, weak, dup, near, exact_answer, bad_gold]
    report = await validate_tasks(tasks, runs=6, source="test")
    by = {t.task_id: t for t in report.tasks[:4]}
    assert by[good.id].status == "valid", by[good.id].problems
    assert by[wrong_ref.id].status == "invalid" and any(
        "reference fails" in p for p in by[wrong_ref.id].problems
    )
    assert by[flaky.id].status == "quarantined" and by[flaky.id].flaky_tests
    assert by[weak.id].status == "invalid" and any("`return_none` passes" in p for p in by[weak.id].problems)
    assert report.tasks[4].status == "invalid" and any("same_task" in p for p in report.tasks[4].problems)
    assert report.tasks[5].status == "invalid" and any("same_prompt" in p for p in report.tasks[5].problems)
    assert report.tasks[6].status == "valid", report.tasks[6].problems
    assert report.tasks[7].status == "invalid" and "not a number" in report.tasks[7].problems[0]
    assert not report.ok


@pytest.mark.slow
def test_humaneval_slice_validates_clean(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tasks = humaneval_tasks()[:12]
    out = tmp_path / "report.json"
    code = run_validation(tasks, source="humaneval[:12]", runs=2, json_report=out)
    data = json.loads(out.read_text())
    assert code == 0, [t for t in data["tasks"] if t["status"] != "valid"]
    assert len(data["tasks"]) == 12
    assert "12 tasks: 12 valid" in capsys.readouterr().out
