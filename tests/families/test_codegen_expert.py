"""The codegen family's scripted expert decodes every prompt's steps from the prompt alone, and its
solutions pass the real grader; a step it does not know gets no answer."""

from __future__ import annotations

from trialground.families.codegen.expert import solve
from trialground.families.experts import expert_for, expert_share
from trialground.tasks.sources import load_source


def test_every_generated_prompt_is_decoded() -> None:
    tasks = load_source("codegen", n=200, seed=3) + load_source("codegen", n=50, seed=3, split="eval")
    assert {t.metadata["shape"] for t in tasks} == {"int", "list"}
    assert all(expert_for(t) is solve and solve(t) is not None for t in tasks)


def test_an_unknown_step_or_another_prompt_gets_no_answer() -> None:
    (task,) = load_source("codegen", n=1, seed=3)
    head, _, _ = task.prompt.partition(": ")
    assert solve(task.model_copy(update={"prompt": f"{head}: add 3, then cube it."})) is None
    assert solve(task.model_copy(update={"prompt": "Write a haiku."})) is None


async def test_the_experts_solutions_pass_the_real_grader() -> None:
    share = await expert_share(load_source("codegen", n=6, seed=5))
    assert (share.solved, share.unrecognised) == (6, 0), share
