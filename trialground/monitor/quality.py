"""How good a policy is on code tasks: greedy pass@1, sampled pass@1 and pass@k with the real grader.

Used by `scripts/pretrain_tiny.py --evaluate` and by the tiny-model quality test. Each task's prompt is
rendered with the policy's chat template as one user message, to the ids a single-turn rollout has for it
(`ChatRenderer.prompt_ids`: the prompt's text is data); the generated text is the submission.
Any grading that ends in an infrastructure error raises: a number made of silent zeros is worse than none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from trialground.errors import VerifierError
from trialground.monitor.eval_stats import outcomes_from_samples, summarise
from trialground.policy.base import Policy, SamplingParams
from trialground.rollout.chat import ChatRenderer
from trialground.tasks.model import Task
from trialground.verify.grader import Grader


@dataclass(frozen=True)
class PassRates:
    tasks: int
    greedy_pass_at_1: float
    sampled_pass_at_1: float | None  # None when samples == 0
    pass_at_k: float | None
    k: int


def prompt_ids(policy: Policy, task: Task, renderer: ChatRenderer | None = None) -> list[int]:
    """The ids a single-turn rollout prompts with for `task` (`SingleTurnEnv` gives the prompt as the one
    user message, `ChatRenderer.prompt_ids` renders it): a special-token string in the prompt is text,
    never a special id. A tokenizer without a chat template is refused (ValueError), as in a rollout."""
    renderer = renderer or ChatRenderer(policy.tokenizer)
    return [int(i) for i in renderer.prompt_ids([{"role": "user", "content": task.prompt}])]


async def _passes(
    grader: Grader, tasks: Sequence[Task], texts: Sequence[str], concurrency: int
) -> list[bool]:
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task, text: str) -> bool:
        async with gate:
            verdict = (await grader.grade(task, text)).verdict
        if verdict.error is not None:
            raise VerifierError(f"grading task {task.id} failed: {verdict.error.message}")
        return verdict.passed

    # every grading finishes before an error is raised: no sandbox is left running behind our back
    results = await asyncio.gather(
        *(one(t, s) for t, s in zip(tasks, texts, strict=True)), return_exceptions=True
    )
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [bool(r) for r in results]


async def measure_pass_rates(
    policy: Policy,
    tasks: Sequence[Task],
    grader: Grader,
    *,
    samples: int = 8,
    max_new_tokens: int = 48,
    seed: int = 0,
    batch_size: int = 64,
    concurrency: int = 4,
) -> PassRates:
    """Greedy pass@1 over `tasks`; with `samples` > 0 also `samples` draws at temperature 1 per task:
    sampled pass@1 and pass@k (k = samples), the unbiased estimates of `monitor.eval_stats`."""
    renderer = ChatRenderer(policy.tokenizer)
    prompts = [prompt_ids(policy, t, renderer) for t in tasks]

    async def texts_for(ps: list[list[int]], params: SamplingParams) -> list[str]:
        out: list[str] = []
        for i in range(0, len(ps), batch_size):
            out += [g.text for g in await policy.generate(ps[i : i + batch_size], params)]
        return out

    greedy = await texts_for(prompts, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    greedy_ok = await _passes(grader, tasks, greedy, concurrency)
    sampled_p1 = pass_k = None
    if samples > 0:
        params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
        reps = [p for p in prompts for _ in range(samples)]
        sampled = await texts_for(reps, params)
        reps_tasks = [t for t in tasks for _ in range(samples)]
        ok = await _passes(grader, reps_tasks, sampled, concurrency)
        outcomes = outcomes_from_samples((t.id, t.domain, p) for t, p in zip(reps_tasks, ok, strict=True))
        scores = summarise(outcomes, ks=sorted({1, samples}))
        sampled_p1, pass_k = scores["eval/pass@1"], scores[f"eval/pass@{samples}"]
    return PassRates(len(tasks), sum(greedy_ok) / len(tasks), sampled_p1, pass_k, samples)
