"""A user's own task source, verifier kind and rubric part, outside the package (imported by dotted path)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.sources import SourceRequest, TaskSource
from trialground.tasks.verifiers import Params, VerifierKind
from trialground.verify.kinds.request import VerifyRequest
from trialground.verify.reward.model import RewardComponent
from trialground.verify.reward.rubric import Contribution, Facts, Part, PartContext
from trialground.verify.verdict import Verdict


class LengthParams(Params):
    length: int = Field(ge=0, description="The answer must have exactly this many characters")


async def _verify_length(grader: object, req: VerifyRequest) -> Verdict:
    assert isinstance(req.params, LengthParams)
    got = len(req.submission.strip())
    return Verdict(
        passed=got == req.params.length, score=float(got == req.params.length), detail=f"{got} chars"
    )


LENGTH = VerifierKind("answer_length", LengthParams, _verify_length, "the answer's length")


def _words(r: SourceRequest) -> list[Task]:
    assert r.n is not None and r.split is not None
    return [
        Task(
            domain="words",
            prompt=f"Write a word of {3 + (r.seed + i) % 5} letters{' in ' + r.arg if r.arg else ''}.",
            split=r.split,
            verifier=VerifierSpec(kind="tg_user_plugin:LENGTH", params={"length": 3 + (r.seed + i) % 5}),
        )
        for i in range(r.n)
    ]


WORDS = TaskSource("words", _words, "words of a given length", generator=True, default_n=4, arg="optional")


class BrevityParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int = Field(ge=1, description="Episodes at most this long earn the bonus")


def _brevity(facts: Facts, ctx: PartContext) -> Contribution:
    """A user's own shaping term: paid (ungated, at the configured weight) to episodes of at most
    `max_tokens` policy tokens."""
    assert isinstance(ctx.params, BrevityParams)
    short = 1.0 if facts.policy_tokens <= ctx.params.max_tokens else 0.0
    return Contribution(
        components=(RewardComponent(name="brevity", value=short, weight=ctx.weight, gated=False),)
    )


BREVITY = Part("brevity", _brevity, BrevityParams, "a bonus for short episodes")
