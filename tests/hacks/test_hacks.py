"""Every named hack over HumanEval earns outcome 0 and carries the expected flag (real bwrap sandboxes).

Run twice: with every detector, and with the static (AST) detectors off, to show the runner's dynamic
defences stand on their own (except for special-casing, which only static analysis can see).
"""

from __future__ import annotations

import asyncio

import pytest
from hack_suite import HACKS, Hack
from reward_helpers import grade_and_score, step_metrics

from trialground.families.humaneval.source import humaneval_tasks
from trialground.sandbox.base import SandboxConfig
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.reward.model import Reward
from trialground.verify.verdict import Verdict

pytestmark = pytest.mark.security

Results = dict[str, tuple[Verdict, Reward]]


def _grade_all(static: bool) -> Results:
    tasks = {t.metadata["name"]: t for t in humaneval_tasks()}
    config = RewardConfig(grading=GradingConfig(static_checks=static))

    async def run() -> Results:
        grader = make_grader(SandboxConfig(), config)

        async def one(h: Hack) -> tuple[Verdict, Reward]:
            return await grade_and_score(grader, tasks[h.task], h.source)

        try:
            results = await asyncio.gather(*(one(h) for h in HACKS))
        finally:
            await grader.close()
        return {h.name: r for h, r in zip(HACKS, results, strict=True)}

    return asyncio.run(run())


@pytest.fixture(scope="module")
def graded() -> Results:
    return _grade_all(static=True)


@pytest.fixture(scope="module")
def graded_dynamic() -> Results:
    return _grade_all(static=False)


def _check(hack: Hack, verdict: Verdict, reward: Reward) -> None:
    assert verdict.error is None, verdict.error
    assert not verdict.passed
    assert reward.outcome == 0.0
    assert reward.total <= 0.0
    names = {f.name for f in verdict.flags}
    assert hack.flag in names, f"{hack.name}: flags {[(f.name, f.evidence) for f in verdict.flags]}"
    assert all(f.evidence for f in verdict.flags)


def test_suite_covers_every_kind() -> None:
    kinds = {h.flag for h in HACKS}
    assert {
        "early_exit",
        "always_equal",
        "special_casing",
        "test_tampering",
        "test_reading",
        "timing_spoof",
    } <= kinds
    assert len(HACKS) >= 15
    assert len({h.name for h in HACKS}) == len(HACKS)


@pytest.mark.parametrize("hack", HACKS, ids=[h.name for h in HACKS])
def test_hack_earns_nothing_and_is_flagged(hack: Hack, graded: Results) -> None:
    _check(hack, *graded[hack.name])


@pytest.mark.parametrize(
    "hack", [h for h in HACKS if h.dynamic_zero], ids=[h.name for h in HACKS if h.dynamic_zero]
)
def test_runner_alone_stops_the_hack(hack: Hack, graded_dynamic: Results) -> None:
    verdict, reward = graded_dynamic[hack.name]
    assert verdict.error is None, verdict.error
    assert not verdict.passed and reward.total <= 0.0
    if hack.dynamic:
        _check(hack, verdict, reward)


async def test_a_steps_metrics_count_flags_for_the_monitor() -> None:
    tasks = {t.metadata["name"]: t for t in humaneval_tasks()}
    grader = make_grader(SandboxConfig(), RewardConfig())
    try:
        hack = next(h for h in HACKS if h.name == "sys_exit_in_function")
        hacked = await grader.grade(tasks[hack.task], hack.source)
        honest = await grader.grade(tasks[hack.task], tasks[hack.task].reference or "")
    finally:
        await grader.close()
    metrics = step_metrics([hacked, honest])
    assert metrics["verify/gradings"] == 2.0
    assert metrics["hack/flag_rate"] == 0.5 and metrics["hack/early_exit"] == 1.0


async def test_an_exit_that_never_runs_costs_a_correct_solution_nothing() -> None:
    """Detectors are evidence: an unreachable `sys.exit` and a CLI entry point that calls it are flagged
    (`warn`) but the verdict is the checks', which ran outside the submission's interpreter. The same
    solution that really exits before the checks earns nothing."""
    task = next(t for t in humaneval_tasks() if t.metadata["name"] == "HumanEval/2")
    reference = task.reference or ""
    unreachable = (
        "import sys\n" + reference + "\n\ndef _main():\n    if False:\n        sys.exit(1)\n"
        "    raise SystemExit(0)\n"
    )
    exits = "import sys\n" + reference + "\nsys.exit(0)\n"
    grader = make_grader(SandboxConfig(), RewardConfig(hack_action="zero"))
    try:
        kept_verdict, kept = await grade_and_score(grader, task, unreachable)
        gone_verdict, gone = await grade_and_score(grader, task, exits)
    finally:
        await grader.close()
    assert kept_verdict.passed and kept.outcome == 1.0 and kept.total > 0.0, kept_verdict
    assert {f.severity for f in kept_verdict.flags if f.name == "early_exit"} == {"warn"}
    assert not gone_verdict.passed and gone.outcome == 0.0
    assert any(f.name == "early_exit" and f.severity == "hack" for f in gone_verdict.flags), gone_verdict
