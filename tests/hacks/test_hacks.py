"""Every named hack over HumanEval earns outcome 0 and carries the expected flag (real bwrap sandboxes).

Run twice: with every detector, and with the static (AST) detectors off, to show the runner's dynamic
defences stand on their own (except for special-casing, which only static analysis can see).
"""

from __future__ import annotations

import asyncio

import pytest
from hack_suite import HACKS, Hack

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.humaneval import humaneval_tasks
from trialground.verify.base import Reward, Verdict
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import Grader

pytestmark = pytest.mark.security

Results = dict[str, tuple[Verdict, Reward]]


def _grade_all(static: bool) -> Results:
    tasks = {t.metadata["name"]: t for t in humaneval_tasks()}
    config = RewardConfig(grading=GradingConfig(static_checks=static))

    async def run() -> Results:
        grader = Grader(SandboxConfig(), config)
        sem = asyncio.Semaphore(4)

        async def one(h: Hack) -> tuple[Verdict, Reward]:
            async with sem:
                return await grader.grade(tasks[h.task], h.source)

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
    assert {"early_exit", "always_equal", "special_casing", "test_tampering", "test_reading", "timing_spoof"} <= kinds
    assert len(HACKS) >= 15
    assert len({h.name for h in HACKS}) == len(HACKS)


@pytest.mark.parametrize("hack", HACKS, ids=[h.name for h in HACKS])
def test_hack_earns_nothing_and_is_flagged(hack: Hack, graded: Results) -> None:
    _check(hack, *graded[hack.name])


@pytest.mark.parametrize("hack", [h for h in HACKS if h.dynamic], ids=[h.name for h in HACKS if h.dynamic])
def test_runner_alone_stops_the_hack(hack: Hack, graded_dynamic: Results) -> None:
    _check(hack, *graded_dynamic[hack.name])
