"""math-verify in a worker process: equivalences, the set/interval false positive, hard timeouts."""

from __future__ import annotations

import pytest

from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.kinds.math import MathWorker, verify_math


@pytest.fixture(scope="module")
def worker():  # type: ignore[no-untyped-def]
    w = MathWorker(timeout_s=30.0)
    yield w
    w.close()


def math_task(answer: str) -> Task:
    return Task(domain="math", prompt="p", verifier=VerifierSpec(kind="math", params={"answer": answer}))


@pytest.mark.parametrize(
    ("gold", "answer", "ok"),
    [
        (r"\frac{1}{2}", r"The answer is \boxed{0.5}", True),
        ("3", r"so \boxed{3}", True),
        ("3", r"\boxed{4}", False),
        (r"\{1,2\}", r"\boxed{\{2,1\}}", True),
        (r"\{1,2\}", r"\boxed{(1,2)}", False),  # math-verify alone says equal
        ("(1,2)", r"\boxed{\{1,2\}}", False),
        ("(1,2)", r"\boxed{(1,2)}", True),
        ("(1,2)", r"\boxed{[1,2]}", False),
        ("2", "", False),
    ],
)
async def test_math_verdicts(worker: MathWorker, gold: str, answer: str, ok: bool) -> None:
    verdict = await verify_math(math_task(gold), answer, worker)
    assert verdict.passed is ok, verdict.detail


def test_hard_timeout_kills_and_restarts_the_worker() -> None:
    w = MathWorker(timeout_s=0.001)  # the first call cannot even import math-verify in time
    try:
        assert w.call("1", "$1$") == (False, "timeout")
        assert w._proc is None  # killed
        w.timeout_s = 30.0
        assert w.call("1", "$1$")[0] is True  # a fresh worker answers
    finally:
        w.close()
