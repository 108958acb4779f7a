"""The hidden checks run in a clean checker process: no attack from the submission's interpreter reaches
a verdict (real bwrap sandboxes, with and without the static detectors).

Every attack must fail (outcome 0, no error) and, where it names a flag, carry it; every honest solution
of the same tasks must pass, so each task can tell a right answer from a wrong one.
"""

from __future__ import annotations

import asyncio

import pytest
from isolation_suite import ATTACKS, HONEST, PATCHER, TASKS, Attack
from reward_helpers import grade_and_score

from trialground.sandbox.base import SandboxConfig
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.reward.model import Reward
from trialground.verify.verdict import Verdict

pytestmark = pytest.mark.security

Results = dict[str, tuple[Verdict, Reward]]


def _grade(static: bool) -> Results:
    # generous deadlines: the honest solutions must pass on a busy machine too
    grading = GradingConfig(static_checks=static, test_timeout_s=5.0, total_timeout_s=60.0)

    async def run() -> Results:
        grader = make_grader(SandboxConfig(), RewardConfig(grading=grading))
        cases = [(a.name, a.task, a.source) for a in ATTACKS]
        cases += [(f"honest:{name}", name, src) for name, src in HONEST.items()]
        cases.append(("patcher", "pid", PATCHER))
        try:
            results = await asyncio.gather(*(grade_and_score(grader, TASKS[t], src) for _, t, src in cases))
        finally:
            await grader.close()
        return {name: r for (name, _, _), r in zip(cases, results, strict=True)}

    return asyncio.run(run())


@pytest.fixture(scope="module")
def graded() -> Results:
    return _grade(static=True)


@pytest.fixture(scope="module")
def graded_dynamic() -> Results:
    return _grade(static=False)


def _fails(attack: Attack, verdict: Verdict, reward: Reward) -> None:
    assert verdict.error is None, verdict.error
    assert not verdict.passed, verdict.tests
    assert reward.outcome == 0.0 and reward.total <= 0.0
    assert all(t.outcome != "passed" for t in verdict.tests) or attack.task in ("add", "parse", "pid")


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_solutions_pass(name: str, graded: Results, graded_dynamic: Results) -> None:
    for results in (graded, graded_dynamic):
        verdict, reward = results[f"honest:{name}"]
        assert verdict.passed and reward.total >= 1.0, (verdict.detail, verdict.tests, verdict.flags)
        assert not verdict.flags


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_earns_nothing(attack: Attack, graded: Results) -> None:
    _fails(attack, *graded[attack.name])


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_earns_nothing_without_static_detectors(attack: Attack, graded_dynamic: Results) -> None:
    verdict, reward = graded_dynamic[attack.name]
    _fails(attack, verdict, reward)
    if attack.flag is not None:
        names = {f.name for f in verdict.flags}
        assert attack.flag in names, (attack.name, [(f.name, f.evidence) for f in verdict.flags])


def test_patched_modules_fail_every_test(graded_dynamic: Results) -> None:
    # the tests computing their expectations with math / random / string are unaffected by the patch
    for attack in ATTACKS:
        if attack.task in ("fabs", "abs", "choice", "letters"):
            verdict, _ = graded_dynamic[attack.name]
            assert [t.outcome for t in verdict.tests] != ["passed"] * len(verdict.tests), attack.name
            assert all(t.outcome in ("failed", "error") for t in verdict.tests), (attack.name, verdict.tests)


def test_the_channel_attacks_fail_per_test_and_the_rest_still_run(graded_dynamic: Results) -> None:
    for name in ("block_forever", "loop_at_import"):
        verdict, _ = graded_dynamic[name]
        # every test has its own result (the rest still ran) and none passed; a test the per-test deadline
        # ended says so. Under heavy load the checker's own import of the submission can fail first: an
        # `error` result, still per test and still never a pass.
        assert verdict.error is None and len(verdict.tests) == 3, verdict
        assert all(t.outcome in ("failed", "error") for t in verdict.tests), verdict.tests
        assert all("timed out" in t.detail for t in verdict.tests if t.outcome == "failed"), verdict.tests
    for name in ("huge_return", "deep_return"):
        verdict, _ = graded_dynamic[name]
        assert all("cannot be sent" in t.detail for t in verdict.tests), verdict.tests
        assert "always_equal" not in {f.name for f in verdict.flags}  # large is not a hack


def test_exceptions_cross_as_their_builtin_class(graded_dynamic: Results) -> None:
    # `except ValueError` in the test caught the submission's ValueError subclass; its broken __str__ stayed
    # in the worker
    verdict, _ = graded_dynamic["unprintable_exception"]
    outcomes = {t.name: (t.outcome, t.detail) for t in verdict.tests}
    assert outcomes["test_raises"][0] == "failed" and "AssertionError" in outcomes["test_raises"][1]
    verdict, _ = graded_dynamic["keyboard_interrupt"]
    assert all(t.outcome == "error" and "KeyboardInterrupt" in t.detail for t in verdict.tests)


def test_checks_run_in_another_process_with_their_own_modules(graded_dynamic: Results) -> None:
    verdict, reward = graded_dynamic["patcher"]
    outcomes = {t.name: (t.outcome, t.detail) for t in verdict.tests}
    assert outcomes["test_elsewhere"] == ("passed", "")  # the submission's pid is not the checker's
    # math.fabs and abs were patched in the worker; the test's own asserts on them still held, and the
    # test failed only for the flag the worker's evidence raised
    assert outcomes["test_unpatched"][0] == "failed"
    assert outcomes["test_unpatched"][1].startswith("flagged:"), outcomes
    assert "test_tampering" in {f.name for f in verdict.flags} and reward.total <= 0.0
