"""The single-turn environment graded by the real grader."""

from __future__ import annotations

from envkit import code_task
from reward_helpers import error_of, reward_of, verdict_of

from trialground.envs.single_turn import SingleTurnEnv
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.grader import Grader

GOOD = "Fixed:\n```python\ndef add(a, b):\n    return a + b\n\n\ndef double(a):\n    return 2 * a\n```\n"


async def test_code_completion_is_extracted_and_graded(grader: Grader) -> None:
    env = SingleTurnEnv(grader)
    task = code_task()
    obs = await env.reset(task)
    assert obs.text == task.prompt and not obs.done
    obs = await env.step(GOOD)
    assert obs.done and verdict_of(obs) is not None and verdict_of(obs).passed and error_of(obs) is None
    assert reward_of(obs) is not None and reward_of(obs).outcome == 1.0
    again = await env.step(GOOD)
    assert again.done and again.end is None  # a step after the end is graded no more


async def test_wrong_completion_fails_and_fork_grades_independently(grader: Grader) -> None:
    env = SingleTurnEnv(grader)
    await env.reset(code_task())
    a, b = await env.fork(2)
    bad = await a.step("```python\ndef add(a, b):\n    return 3\n```")
    good = await b.step(GOOD)
    assert verdict_of(bad) is not None and not verdict_of(bad).passed and reward_of(bad) is not None
    assert reward_of(bad).total == 0.0  # type: ignore[union-attr]
    assert verdict_of(good) is not None and verdict_of(good).passed  # type: ignore[union-attr]


async def test_exact_answer_task_passes_completion_unchanged(grader: Grader) -> None:
    task = Task(domain="qa", prompt="Say 42.", verifier=VerifierSpec(kind="exact", params={"answer": "42"}))
    env = SingleTurnEnv(grader)
    await env.reset(task)
    assert env.submission_of("```\n42\n```") == "```\n42\n```"
    obs = await env.step("42")
    assert obs.done and verdict_of(obs) is not None and verdict_of(obs).error is None
