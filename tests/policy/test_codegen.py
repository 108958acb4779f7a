"""The quickstart code family: deterministic, disjoint splits, a huge space, references pass hidden tests."""

from __future__ import annotations

import pytest
from reward_helpers import grade_and_score

from trialground.families.codegen.source import (
    INT_OPS,
    LIST_OPS,
    LIST_REDUCERS,
    generate_codegen_tasks,
    sample_instances,
    split_of,
)


def test_deterministic_under_seed_and_seed_matters() -> None:
    a = generate_codegen_tasks(30, seed=1, split="train")
    b = generate_codegen_tasks(30, seed=1, split="train")
    c = generate_codegen_tasks(30, seed=2, split="train")
    assert [t.id for t in a] == [t.id for t in b]
    assert [t.id for t in a] != [t.id for t in c]
    assert len({t.id for t in a}) == 30


def test_task_shape() -> None:
    for task in generate_codegen_tasks(20, seed=0, split="eval"):
        assert task.domain == "code" and task.split == "eval"
        assert task.verifier.kind == "code_tests"
        assert task.verifier.params == {"solution_path": "solution.py", "expected_tests": 3}
        tests = task.hidden_checks["test_hidden.py"]
        assert tests.startswith("from solution import f\n") and tests.count("\ndef test_") == 3
        assert task.reference is not None and task.reference.startswith("def f(")
        assert task.prompt.startswith("Write f(") and len(task.prompt) < 200
        assert not task.files and not task.visible_checks
        # hidden inputs never appear in the prompt (the prompt shows no examples at all)
        assert "f(" not in task.prompt.split(":", 1)[1]


def test_splits_are_disjoint_by_what_they_compute() -> None:
    train = sample_instances(3000, seed=0, split="train")
    held = sample_instances(600, seed=0, split="eval")
    semantic = lambda insts: {i.key.split("|")[0] for i in insts}  # noqa: E731
    assert not semantic(train) & semantic(held)
    assert all(split_of(i.key) == "train" for i in train)
    # about 20% of the space is held out
    drawn = sample_instances(400, seed=5, split="train") + sample_instances(100, seed=5, split="eval")
    assert {i.split for i in drawn} == {"train", "eval"}


def test_space_is_far_larger_than_pretraining() -> None:
    n_int = sum(max(1, len(op.consts)) * len(op.phrases) for op in INT_OPS)
    n_list = sum(max(1, len(op.consts)) for op in LIST_OPS)
    space = n_int**3 + n_list**2 * len(LIST_REDUCERS)
    assert space > 1_000_000  # pre-training sees ~10^4 instances


def test_every_step_matters_on_hidden_inputs() -> None:
    for inst in sample_instances(200, seed=9, split="eval"):
        outputs = [repr(y) for _, y in inst.cases]
        assert len(set(outputs)) >= 3


@pytest.mark.slow
async def test_references_pass_and_wrong_answers_fail_with_the_real_grader() -> None:
    from trialground.sandbox.base import SandboxConfig
    from trialground.verify.grader import make_grader

    grader = make_grader(SandboxConfig())
    try:
        for task in generate_codegen_tasks(6, seed=4, split="eval"):
            assert task.reference is not None
            verdict, _ = await grade_and_score(grader, task, task.reference)
            assert verdict.error is None and verdict.passed, verdict.detail
            # off by one in the last step: caught by the hidden tests
            lines = task.reference.splitlines()
            wrong = "\n".join([*lines[:-1], lines[-1].replace("return ", "return 1 + "), ""])
            verdict, _ = await grade_and_score(grader, task, wrong)
            assert verdict.error is None and not verdict.passed
    finally:
        await grader.close()


def test_hidden_cases_are_what_the_reference_computes() -> None:
    for inst in sample_instances(300, seed=3, split="eval"):
        namespace: dict = {}
        exec(inst.solution, namespace)
        for x, y in inst.cases:
            assert namespace["f"](list(x) if isinstance(x, list) else x) == y, (inst.solution, x)
