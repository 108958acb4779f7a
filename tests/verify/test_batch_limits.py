"""A batched grading runs under its own task's limits, never a sibling's (real sandboxes)."""

from __future__ import annotations

import asyncio

import pytest
from reward_helpers import grade_and_score

from trialground.sandbox.base import Limits, SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader
from trialground.verify.verdict import Verdict

CHECK = "import solution\n\n\ndef test_s():\n    assert solution.s(3) == 6\n"
OK = "def s(x):\n    return 2 * x\n"
HOG = "def s(x):\n    b = bytearray(300 << 20)\n    return 2 * x + len(b) * 0\n"  # 300 MiB, touched
BURN = (  # 3 CPU seconds, well within the test's deadline
    "import time\n\ndef s(x):\n    t = time.process_time()\n    while time.process_time() - t < 3.0:\n"
    "        pass\n    return 2 * x\n"
)


def task(prompt: str, limits: Limits | None = None, **params: object) -> Task:
    return Task(
        domain="code",
        prompt=prompt,
        limits=limits,
        hidden_checks={"test_hidden.py": CHECK},
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1, **params}),
    )


LOOSE = task("double it")  # the run's limits: 512 MiB
TIGHT = task("double it in 96 MiB", Limits(memory_mb=96))


@pytest.fixture
async def grader():  # type: ignore[no-untyped-def]
    g = make_grader(SandboxConfig(), RewardConfig())
    assert g.resource("code_tests").verifier.batching
    yield g
    await g.close()


def verdicts(out: list) -> list[Verdict]:  # type: ignore[type-arg]
    assert all(isinstance(v, Verdict) for v in out), out
    return out


async def test_a_member_over_its_own_memory_limit_fails_behind_a_looser_sibling(grader: Grader) -> None:
    out = verdicts(
        await grader.resource("code_tests").verifier.verify_many(
            [(LOOSE, OK), (TIGHT, HOG), (TIGHT, OK), (LOOSE, HOG)]
        )
    )
    assert out[0].passed and out[2].passed and out[3].passed  # 300 MiB fits the run's 512
    assert not out[1].passed, out[1]  # not within its task's 96 MiB, whatever batch it is in


async def test_the_grader_batches_only_gradings_of_equal_limits(grader: Grader) -> None:
    calls: list[set[Limits]] = []
    inner = grader.resource("code_tests").verifier.verify_many

    async def recording(items):  # type: ignore[no-untyped-def]
        calls.append({t.limits or grader.sandbox_config.limits for t, _ in items})
        return await inner(items)

    grader.resource("code_tests").batcher._run_batch = recording
    jobs = [(LOOSE, f"{OK}# {i}\n") for i in range(3)] + [(TIGHT, HOG), (TIGHT, OK)]
    results = await asyncio.gather(*(grade_and_score(grader, t, s) for t, s in jobs))
    assert [v.passed for v, _ in results] == [True, True, True, False, True], [v for v, _ in results]
    assert results[3][1].total == 0.0  # scored, not dropped
    assert all(len(limits) == 1 for limits in calls), calls
    assert len(calls) == 2  # one call per set of limits: the tight task's two gradings still share one


async def test_a_member_gets_its_own_task_cpu_time_in_a_batch(grader: Grader) -> None:
    short = task("double it in 1 CPU second", Limits(cpu_s=1.0), test_timeout_s=60.0)
    alone = await grader.resource("code_tests").verifier.verify(short, BURN)
    assert not alone.passed, alone
    out = verdicts(
        await grader.resource("code_tests").verifier.verify_many([(short, OK), (short, BURN), (short, OK)])
    )
    assert out[0].passed and out[2].passed
    assert not out[1].passed, out[1]  # the batch's exec has the CPU time of all three; its worker has 1 s
