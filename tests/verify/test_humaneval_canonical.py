"""All 164 HumanEval canonical solutions pass with reward >= 1; empty and `pass` earn 0 (real bwrap)."""

from __future__ import annotations

import asyncio

import pytest
from reward_helpers import grade_and_score

from trialground.families.humaneval.source import humaneval_tasks
from trialground.sandbox.base import SandboxConfig
from trialground.verify.grader import make_grader
from trialground.verify.reward.model import Reward
from trialground.verify.verdict import Verdict

pytestmark = pytest.mark.slow


def _grade(submissions: list[tuple[int, str]]) -> list[tuple[Verdict, Reward]]:
    tasks = humaneval_tasks()

    async def run() -> list[tuple[Verdict, Reward]]:
        grader = make_grader(SandboxConfig())

        async def one(i: int, text: str) -> tuple[Verdict, Reward]:
            return await grade_and_score(grader, tasks[i], text)

        try:
            return list(await asyncio.gather(*(one(i, s) for i, s in submissions)))
        finally:
            await grader.close()

    return asyncio.run(run())


def test_all_canonical_solutions_pass() -> None:
    tasks = humaneval_tasks()
    assert len(tasks) == 164
    results = _grade([(i, t.reference or "") for i, t in enumerate(tasks)])
    bad = [
        (t.metadata["name"], v.detail, [f.evidence for f in v.flags], v.error)
        for t, (v, r) in zip(tasks, results, strict=True)
        if not (v.passed and r.total >= 1.0 and v.error is None and not v.flags)
    ]
    assert not bad, bad[:5]


def test_empty_and_pass_earn_zero() -> None:
    picks = range(0, 164, 4)  # 41 tasks x 2 trivial submissions
    results = _grade([(i, s) for i in picks for s in ("", "pass\n")])
    for verdict, reward in results:
        assert verdict.error is None
        assert not verdict.passed and reward.total == 0.0
