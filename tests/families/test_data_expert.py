"""The data family's scripted expert computes each question's answer from the workspace's CSV with its own
code, and the real grader pays it; a question it does not know, or a missing file, gets no answer."""

from __future__ import annotations

from trialground.families.data.expert import solve
from trialground.families.experts import expert_for, expert_share
from trialground.tasks.sources import load_source


def test_every_question_is_answered_as_the_generator_computed_it() -> None:
    tasks = load_source("data", n=120, seed=3) + load_source("data", n=30, seed=3, split="eval")
    for task in tasks:
        assert expert_for(task) is solve
        reply = solve(task)
        assert reply is not None and reply.rsplit("Answer: ", 1)[1] == task.reference, task.prompt


def test_an_unknown_question_or_a_missing_file_gets_no_answer() -> None:
    (task,) = load_source("data", n=1, seed=4)
    head, _, _ = task.prompt.partition(" rows; header")
    assert (
        solve(task.model_copy(update={"prompt": head + " rows). What is the mode? Answer: <value>"})) is None
    )
    assert solve(task.model_copy(update={"files": {}})) is None


async def test_the_experts_replies_pass_the_real_grader() -> None:
    share = await expert_share(load_source("data", n=12, seed=5))
    assert (share.solved, share.unrecognised) == (12, 0), share
