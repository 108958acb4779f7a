"""Micro-batched gradings: one sandbox exec for many submissions, and no leak between them."""

from __future__ import annotations

import asyncio

import pytest
from reward_helpers import grade_and_score

from trialground.errors import VerifierError
from trialground.microbatch import Batcher
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import Grader, make_grader

LISTING = """
import solution


def test_clean_workspace():
    assert solution.listing() == (['solution.py'], [])
"""
SNOOP = "import os\n\ndef listing():\n    return sorted(os.listdir('.')), sorted(os.listdir('/tmp'))\n"
LITTER = (
    "import os\nos.makedirs('locked/deep', exist_ok=True)\nopen('locked/deep/answers.txt', 'w').write('42')\n"
    "os.chmod('locked/deep', 0)\nos.chmod('locked', 0)\nopen('/tmp/note', 'w').write('hi')\n"
    "open('extra.py', 'w').write('x = 1')\n" + SNOOP
)


def listing_task() -> Task:
    return Task(
        domain="code",
        prompt="list",
        hidden_checks={"test_hidden.py": LISTING},
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
    )


@pytest.fixture
async def grader():  # type: ignore[no-untyped-def]
    g = make_grader(SandboxConfig(), RewardConfig())
    yield g
    await g.close()


async def test_nothing_leaks_between_submissions_of_a_batch(grader: Grader) -> None:
    task = listing_task()
    out = await grader.resource("code_tests").verifier.verify_many(
        [(task, LITTER), (task, SNOOP), (task, "import os\nos._exit(0)\n"), (task, SNOOP)]
    )
    assert not out[0].passed  # type: ignore[union-attr]  # it saw its own litter
    assert out[1].passed, out[1]  # type: ignore[union-attr]  # ... the next one sees a clean workspace and /tmp
    assert not out[2].passed  # type: ignore[union-attr]
    assert "early_exit" in {f.name for f in out[2].flags}  # type: ignore[union-attr]
    assert out[3].passed  # type: ignore[union-attr]  # a sibling's early exit changes nothing


async def test_concurrent_gradings_share_batches(grader: Grader) -> None:
    task = listing_task()
    calls = 0
    inner = grader.resource("code_tests").verifier.verify_many

    async def counting(items):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await inner(items)

    grader.resource("code_tests").batcher._run_batch = counting
    # distinct texts: identical ones in flight would share one grading (`share_identical`), not batch
    results = await asyncio.gather(*(grade_and_score(grader, task, f"{SNOOP}# {i}\n") for i in range(10)))
    assert all(v.passed and r.total == 1.0 for v, r in results)
    assert calls < 10


async def test_batching_off_still_grades() -> None:
    g = make_grader(SandboxConfig(), RewardConfig(grading=GradingConfig(max_batch=1)))
    try:
        verdict, _ = await grade_and_score(g, listing_task(), SNOOP)
    finally:
        await g.close()
    assert verdict.passed


async def test_batcher_flushes_on_size_and_window_and_isolates_errors() -> None:
    seen: list[list[int]] = []

    async def run(items):  # type: ignore[no-untyped-def]
        seen.append(list(items))
        return [VerifierError("odd") if i % 2 else i * 10 for i in items]

    b: Batcher[int, int] = Batcher(run, max_batch=3, window_s=0.05)
    results = await asyncio.gather(*(b.submit(i) for i in range(4)), return_exceptions=True)
    assert results[0] == 0 and results[2] == 20
    assert isinstance(results[1], VerifierError) and isinstance(results[3], VerifierError)
    assert seen == [[0, 1, 2], [3]]  # three by size, the last one after the window
    await b.close()


async def test_an_even_batcher_cuts_what_arrived_in_one_turn_into_equal_calls() -> None:
    seen: list[list[int]] = []

    async def run(items):  # type: ignore[no-untyped-def]
        seen.append(list(items))
        return list(items)

    even: Batcher[int, int] = Batcher(run, max_batch=4, window_s=0.05, even=True)
    assert await asyncio.gather(*(even.submit(i) for i in range(10))) == list(range(10))
    assert seen == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]  # not 4, 4 and 2
    seen.clear()
    plain: Batcher[int, int] = Batcher(run, max_batch=4, window_s=0.05)
    assert await asyncio.gather(*(plain.submit(i) for i in range(10))) == list(range(10))
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    seen.clear()
    assert await asyncio.gather(*(even.submit(i) for i in range(3))) == [0, 1, 2]  # below max: the window
    assert seen == [[0, 1, 2]]
    await even.close()
    await plain.close()
