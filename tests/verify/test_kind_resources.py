"""Verifier kinds own their resources: the grader makes what a kind's own factory builds, hands it to the
kind, shares it between kinds naming the same factory, and closes it; it builds no kind's resource by name."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.verifiers import KINDS, VerifierKind
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.kinds.code_grading import CodeGrading
from trialground.verify.kinds.context import GradingContext
from trialground.verify.kinds.request import VerifyRequest
from trialground.verify.verdict import Verdict


class _Gold(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    gold: str


class Tally:
    """A kind's resource: counts the gradings it served; its close is awaited with the grader's."""

    made: ClassVar[list[Tally]] = []

    def __init__(self, context: GradingContext) -> None:
        self.context = context
        self.graded = 0
        self.closed = False
        Tally.made.append(self)

    async def close(self) -> None:
        self.closed = True


async def _tallied(tally: Tally, req: VerifyRequest) -> Verdict:
    tally.graded += 1
    assert isinstance(req.params, _Gold)
    return Verdict(passed=req.submission == req.params.gold, detail=f"grading {tally.graded}")


SEEN: list[object] = []


async def _plain(first: object, req: VerifyRequest) -> Verdict:
    SEEN.append(first)
    return Verdict(passed=True)


for _kind in (
    VerifierKind("tallied_for_tests", _Gold, _tallied, "gold text, counted", resource=Tally),
    VerifierKind("tallied_too_for_tests", _Gold, _tallied, "the same resource", resource=Tally),
    VerifierKind("plain_for_tests", _Gold, _plain, "no resource: the context"),
    VerifierKind(
        "unbuilt_for_tests", _Gold, _plain, "a resource path that does not import", resource="nope:X"
    ),
):
    KINDS.register(_kind, replace=True)


def _task(kind: str, gold: str = "yes") -> Task:
    return Task(domain="qa", prompt="?", verifier=VerifierSpec(kind=kind, params={"gold": gold}))


def test_a_kinds_own_resource_is_made_once_shared_by_its_factory_and_closed_with_the_grader() -> None:
    Tally.made.clear()
    reward = RewardConfig(judge_sample_rate=0.0)
    grader = make_grader(SandboxConfig(backend="process"), reward)

    async def grade() -> list[Verdict]:
        try:
            tasks = [_task("tallied_for_tests"), _task("tallied_too_for_tests"), _task("tallied_for_tests")]
            graded = await asyncio.gather(*(grader.grade(t, "yes") for t in tasks))
            return [g.verdict for g in graded]
        finally:
            await grader.close()

    verdicts = asyncio.run(grade())
    assert [v.passed for v in verdicts] == [True, True, True]
    (tally,) = Tally.made  # one resource for both kinds naming the factory, made on the first grading
    assert tally.graded == 3 and tally.closed
    assert tally.context.reward_config is reward and tally.context.sandbox_config.backend == "process"


def test_a_kind_without_a_resource_receives_the_grading_context() -> None:
    SEEN.clear()
    grader = make_grader(SandboxConfig(backend="process"))

    async def grade() -> None:
        try:
            await grader.grade(_task("plain_for_tests"), "anything")
        finally:
            await grader.close()

    asyncio.run(grade())
    assert [grader.context] == SEEN and isinstance(SEEN[0], GradingContext)


def test_the_code_kinds_share_one_code_grading_and_the_grader_holds_none_by_name() -> None:
    grader = make_grader(SandboxConfig(backend="process"))
    try:
        code = grader.resource("code_tests")
        assert isinstance(code, CodeGrading)
        assert grader.resource("failed_tests") is code  # the gameable kind batches with the real one
        assert grader.resource("exact") is grader.context
        for attr in ("code", "checks", "math", "swe", "code_text"):
            assert not hasattr(grader, attr), attr
    finally:
        asyncio.run(grader.close())


def test_a_resource_that_cannot_be_made_is_an_infrastructure_error_naming_the_kind() -> None:
    grader = make_grader(SandboxConfig(backend="process"))

    async def grade() -> Verdict:
        try:
            return (await grader.grade(_task("unbuilt_for_tests"), "yes")).verdict
        finally:
            await grader.close()

    verdict = asyncio.run(grade())
    assert not verdict.passed and verdict.error is not None  # never a silent 0 the loss would learn from
    assert (
        verdict.error.kind == "bad_task"
        and "unbuilt_for_tests" in verdict.detail
        and "nope:X" in verdict.detail
    )
