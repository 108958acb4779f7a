"""The code_tests verifier in real bwrap sandboxes: per-test results, counting, timeouts, workspaces."""

from __future__ import annotations

import pytest
from reward_helpers import grade_and_score

from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import Grader, make_grader

CHECKS = """
from solution import add


def test_small():
    assert add(1, 2) == 3


def test_negative():
    assert add(-1, -2) == -3


def test_type():
    assert add(2, 2) == 4 and type(add(2, 2)) is int
"""
GOOD = "def add(a, b):\n    return a + b\n"


def code_task(
    checks: str = CHECKS, expected: int = 3, visible: dict[str, str] | None = None, **params: object
) -> Task:
    return Task(
        domain="code",
        prompt="write add(a, b)",
        hidden_checks={"test_hidden.py": checks},
        visible_checks=visible or {},
        reference=GOOD,
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": expected, **params}),
    )


@pytest.fixture
async def grader():  # type: ignore[no-untyped-def]
    g = make_grader(
        SandboxConfig(), RewardConfig(grading=GradingConfig(test_timeout_s=2.0, total_timeout_s=20.0))
    )
    yield g
    await g.close()


async def test_passing_solution_has_per_test_results(grader: Grader) -> None:
    verdict, reward = await grade_and_score(grader, code_task(), GOOD)
    assert verdict.passed and reward.total == 1.0
    assert [(t.name, t.outcome) for t in verdict.tests] == [
        ("test_small", "passed"), ("test_negative", "passed"), ("test_type", "passed")
    ]  # fmt: skip


async def test_partial_solution_fails_with_score(grader: Grader) -> None:
    verdict, reward = await grade_and_score(
        grader, code_task(), "def add(a, b):\n    return abs(a) + abs(b)\n"
    )
    assert not verdict.passed and reward.total == 0.0
    assert verdict.score == pytest.approx(2 / 3)
    assert [t.outcome for t in verdict.tests] == ["passed", "failed", "passed"]


async def test_expected_tests_must_actually_run(grader: Grader) -> None:
    verdict, _ = await grade_and_score(grader, code_task(expected=5), GOOD)
    assert not verdict.passed
    assert "only 3 of 5 expected tests ran" in verdict.detail


async def test_skips_and_errors_are_failures(grader: Grader) -> None:
    checks = CHECKS + "\n\ndef test_skipped():\n    import unittest\n    raise unittest.SkipTest('later')\n"
    verdict, _ = await grade_and_score(grader, code_task(checks, expected=4), GOOD)
    assert not verdict.passed
    assert verdict.tests[-1].outcome == "error"


async def test_hung_test_times_out_and_the_rest_still_run(grader: Grader) -> None:
    solution = "def add(a, b):\n    while a == 1:\n        pass\n    return a + b\n"
    verdict, _ = await grade_and_score(grader, code_task(), solution)
    outcomes = {t.name: (t.outcome, t.detail) for t in verdict.tests}
    assert outcomes["test_small"][0] == "failed" and "timed out" in outcomes["test_small"][1]
    assert outcomes["test_negative"][0] == "passed"
    assert outcomes["test_type"][0] == "passed"
    assert not verdict.passed and verdict.error is None


async def test_broken_solution_is_a_failure_not_an_error(grader: Grader) -> None:
    verdict, reward = await grade_and_score(grader, code_task(), "def add(a, b) return a + b")
    assert verdict.error is None and not verdict.passed and reward.total == 0.0
    assert all(t.outcome == "error" and "SyntaxError" in t.detail for t in verdict.tests)


async def test_hidden_checks_never_touch_the_disk(grader: Grader) -> None:
    checks = "import solution\n\ndef test_listing():\n    assert solution.listing() == ['solution.py']\n"
    solution = "import os\n\ndef listing():\n    return sorted(os.listdir('.'))\n"
    verdict, _ = await grade_and_score(grader, code_task(checks, expected=1), solution)
    assert verdict.passed, verdict.tests


async def test_visible_checks_flag_overfitting(grader: Grader) -> None:
    visible = {
        "test_visible.py": "from solution import add\n\ndef test_example():\n    assert add(1, 2) == 3\n"
    }
    verdict, _ = await grade_and_score(grader, code_task(visible=visible), "def add(a, b):\n    return 3\n")
    assert not verdict.passed
    assert "special_casing" in {f.name for f in verdict.flags}
    ok, _ = await grade_and_score(grader, code_task(visible=visible), GOOD)
    assert ok.passed and not ok.flags
    assert ok.tests[-1].outcome == "skipped"  # visible checks run only when a hidden one failed


async def test_solution_is_read_from_the_agent_workspace(grader: Grader) -> None:
    visible = {
        "test_visible.py": "from solution import add\n\ndef test_example():\n    assert add(1, 2) == 3\n"
    }
    task = code_task(visible=visible)
    async with await open_sandbox(SandboxConfig(), {"solution.py": GOOD, **visible}) as agent:
        verdict, reward = await grade_and_score(grader, task, "this text is ignored", workspace=agent)
        assert verdict.passed and reward.total == 1.0
        await agent.write("conftest.py", "import pytest\n")
        await agent.write("test_visible.py", "def test_example():\n    pass\n")
        verdict, reward = await grade_and_score(grader, task, "", workspace=agent)
    assert not verdict.passed and reward.total == 0.0
    evidence = [f.evidence for f in verdict.flags if f.name == "test_tampering"]
    assert any("conftest.py" in e for e in evidence) and any("test_visible.py" in e for e in evidence)


async def test_infrastructure_failure_is_an_error_not_a_zero() -> None:
    grading = GradingConfig(python="no-such-python")
    g = make_grader(SandboxConfig(), RewardConfig(grading=grading))
    try:
        verdict, reward = await grade_and_score(g, code_task(), GOOD)
    finally:
        await g.close()
    assert verdict.error is not None and verdict.error.boundary in ("sandbox", "verifier")
    assert reward.dropped


async def test_judge_kind_without_judge_is_an_error(grader: Grader) -> None:
    task = Task(domain="qa", prompt="p", verifier=VerifierSpec(kind="judge"))
    verdict, reward = await grade_and_score(grader, task, "x")
    assert verdict.error is not None and verdict.error.kind == "no_judge"
    assert reward.dropped


def test_sealing_moves_literals_out_of_the_test_code() -> None:
    from trialground.verify.kinds.sealing import sealed

    source = (
        "from solution import f\n\n"
        "def test_a():\n    assert f(1) == [1, 2]\n    assert 'secret' == f(2)\n    assert f(3) < 5\n\n"
        "def helper():\n    assert f(4) == 99\n"
    )
    code, expected, checks = sealed(source, "test_x.py")
    assert expected == ([1, 2], "secret", 99)
    assert checks == {"test_a": [0, 1]}  # helper's check is sealed too, but not required of a test

    def consts(c):  # type: ignore[no-untyped-def]
        for k in c.co_consts:
            yield from consts(k) if hasattr(k, "co_consts") else (k,)

    assert "secret" not in set(consts(code)) and 99 not in set(consts(code))
    assert 5 in set(consts(code))  # `<` comparisons stay in the test


async def test_sealed_checks_decide_even_when_the_worker_says_pass(grader: Grader) -> None:
    # the worker only sends values for sealed checks; the supervisor compares them after the fact
    verdict, _ = await grade_and_score(grader, code_task(), "def add(a, b):\n    return a + b + (a == 1)\n")
    assert [t.outcome for t in verdict.tests] == ["failed", "passed", "passed"]
    assert "sealed" in verdict.tests[0].detail


async def test_isolated_mode_stateful_and_callback_tests_fail_clearly(grader: Grader) -> None:
    # The checks run in a process that never imports the solution: instances of its classes cannot cross
    # (a failure, not flagged: classes are simply not testable in isolation), callbacks cannot be sent
    # (a TypeError in the test), and arguments go by value (the submission's mutation is not seen).
    checks = (
        "import solution\n\n"
        "def test_class():\n    assert solution.Counter().count() == 0\n\n"
        "def test_callback():\n    assert solution.apply(lambda x: x + 1, 1) == 2\n\n"
        "def test_by_value():\n    xs = [3, 1, 2]\n    solution.sort_in_place(xs)\n"
        "    assert xs == [3, 1, 2]\n\n"
        "def test_constant():\n    assert solution.LIMIT == 10 and type(solution.LIMIT) is int\n"
    )
    solution = (
        "LIMIT = 10\n\nclass Counter:\n    def count(self):\n        return 0\n\n"
        "def apply(f, x):\n    return f(x)\n\ndef sort_in_place(xs):\n    xs.sort()\n"
    )
    verdict, _ = await grade_and_score(grader, code_task(checks, expected=4), solution)
    outcomes = {t.name: (t.outcome, t.detail) for t in verdict.tests}
    assert outcomes["test_class"][0] == "failed" and "classes cannot be checked" in outcomes["test_class"][1]
    assert outcomes["test_callback"][0] == "error" and "plain data only" in outcomes["test_callback"][1]
    assert outcomes["test_by_value"] == ("passed", "")
    assert outcomes["test_constant"] == ("passed", "")
    assert not verdict.flags


async def test_exceptions_of_the_submission_are_raised_in_the_checks(grader: Grader) -> None:
    checks = (
        "import solution\n\n"
        "def test_value_error():\n    try:\n        solution.parse('x')\n    except ValueError as e:\n"
        "        assert 'bad input' in str(e)\n    else:\n        raise AssertionError('no error')\n\n"
        "def test_key_error():\n    try:\n        solution.look({}, 'k')\n"
        "    except LookupError:\n        pass\n"
        "    else:\n        raise AssertionError('no error')\n"
    )
    solution = (
        "class BadInput(ValueError):\n    pass\n\n"
        "def parse(s):\n    raise BadInput('bad input: ' + s)\n\ndef look(d, k):\n    return d[k]\n"
    )
    verdict, _ = await grade_and_score(grader, code_task(checks, expected=2), solution)
    assert verdict.passed, verdict.tests


SURROGATES = [
    "def add(a, b):\n    return a - b  # \ud800\n",
    "def add(a, b:\n    '\udcff'\n",
    GOOD + "# \ud83d\n",
]


@pytest.mark.parametrize("text", SURROGATES)
async def test_a_lone_surrogate_is_graded_not_an_infrastructure_error(grader: Grader, text: str) -> None:
    """No UTF-8 file can hold a lone surrogate; a model's text may (a server's JSON may send one). It is
    graded as U+FFFD there, like any other text, never an error that would keep a wrong answer out of
    training."""
    verdict, reward = await grade_and_score(grader, code_task(), text)
    assert verdict.error is None, verdict.error
    assert verdict.passed == text.startswith(GOOD) and reward.total == float(verdict.passed)
