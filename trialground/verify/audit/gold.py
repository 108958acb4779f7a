"""The gold gate: a task is sound only if its reference passes, an empty and a trivially wrong submission
fail, and its visible checks agree with its hidden ones (the reference passes both; the wrong baseline
fails both).

Each is graded by the same grader and in the same way as a run grades (`Grader.grade`), without an agent
workspace, as a single-turn submission is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from trialground.tasks.model import Task
from trialground.tasks.verifiers import AnswerParams, MathParams, NumericParams
from trialground.verify.audit.strategy import surface, wrong_baseline
from trialground.verify.kinds.answers import parse_number
from trialground.verify.kinds.code_jobs import test_names
from trialground.verify.verdict import Verdict

Grade = Callable[[Task, str], Awaitable[Verdict]]


def trivially_wrong(task: Task) -> str:
    """A submission that must fail: the wrong baseline on code and program surfaces; on answer surfaces a
    value the gold is not (the gold number moved by more than any tolerance, or another word)."""
    kind = surface(task)
    if kind in ("code", "program"):
        return wrong_baseline(task)
    params = task.verifier.typed_params
    gold = (
        getattr(params, "answer", None)
        if isinstance(params, AnswerParams | NumericParams | MathParams)
        else None
    )
    if isinstance(gold, list):
        gold = gold[0] if gold else None
    number = parse_number(str(gold)) if gold is not None else None
    if number is not None:
        return f"Answer: {number + max(1.0, abs(number)) * 7 + 13:g}"
    return "Answer: zz-not-the-answer"


def visible_task(task: Task) -> Task | None:
    """The task graded by its visible checks instead of its hidden ones (code and program surfaces with
    visible checks), or None."""
    kind = surface(task)
    if not task.visible_checks or kind not in ("code", "program"):
        return None
    params = dict(task.verifier.params)
    if kind == "code":
        params["expected_tests"] = sum(len(test_names(src)) for src in task.visible_checks.values())
    elif any(not p.endswith((".py", ".sh")) for p in task.visible_checks):
        return None  # visible files of a program task that are not programs (data, notes)
    body = task.model_dump()
    body.update(
        id="",
        hidden_checks=dict(task.visible_checks),
        verifier={"kind": task.verifier.kind, "params": params},
    )
    return Task.model_validate(body)


async def gold_problems(task: Task, grade: Grade) -> list[str]:
    """What the gold gate finds wrong with `task` (empty: it passes)."""
    problems: list[str] = []
    if task.reference is None:
        return ["no reference solution"]
    ref = await grade(task, task.reference)
    if ref.error is not None:
        return [f"the reference could not be graded: {ref.error.message[:160]}"]
    if not ref.passed:
        problems.append(f"the reference fails: {ref.detail[:160]}")
    wrong = trivially_wrong(task)
    for label, text in (("empty", ""), ("trivially wrong", wrong)):
        verdict = await grade(task, text)
        if verdict.passed and verdict.error is None:
            problems.append(f"the {label} submission passes")
    visible = visible_task(task)
    if visible is not None:
        for label, text, want in (("reference", task.reference, True), ("wrong baseline", wrong, False)):
            seen = await grade(visible, text)
            if seen.error is None and seen.passed != want:
                problems.append(
                    f"visible and hidden checks disagree on the {label}: visible "
                    f"{'passes' if seen.passed else 'fails'} ({seen.detail[:100]})"
                )
    return problems
