"""Evaluation tasks never leak into training: a copy that differs only in spacing, and a near-duplicate,
are removed from the training set (not only logged), and the counts reach the run's startup metrics."""

from __future__ import annotations

import json
from pathlib import Path

from trialground.tasks.config import TaskPoolConfig, TaskSourceConfig
from trialground.tasks.dedup import content_key, decontaminate
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.pool import load_task_sets

QUESTIONS = [
    "A train leaves Lyon at 9:40 and reaches Paris at 11:52 after covering 465 km; what is its mean speed?",
    "How many distinct necklaces of seven beads can be made from three colours, up to rotation only?",
    "Sum every prime below two hundred whose decimal digits are themselves all prime numbers.",
    "Find the remainder when seventeen to the power two thousand and three is divided by ninety-one.",
]
OTHER = [
    f"Compute the product of {a} and {b}, then subtract the sum of their squares from it."
    for a, b in [(3, 8), (12, 5), (7, 7), (21, 4), (9, 13), (30, 2)]
]


def _task(prompt: str, split: str = "train", answer: str = "1") -> Task:
    return Task(
        domain="qa",
        prompt=prompt,
        split=split,
        verifier=VerifierSpec(kind="exact", params={"answer": answer}),
    )


def _write(path: Path, tasks: list[Task]) -> Path:
    path.write_text("".join(json.dumps(t.model_dump(mode="json", exclude={"id"})) + "\n" for t in tasks))
    return path


def _leaky_train() -> tuple[list[Task], list[Task]]:
    evals = [_task(q, "eval") for q in QUESTIONS]
    train = [
        _task(QUESTIONS[0] + " "),  # a trailing space: a different id, the same task
        _task("  " + QUESTIONS[1].replace(" ", "  ")),  # doubled spaces
        _task("Show your work. " + QUESTIONS[2] + " Give the answer alone."),  # holds the eval question
        *[_task(q) for q in OTHER],
    ]
    return train, evals


def test_a_copy_with_a_trailing_space_has_the_same_content_key() -> None:
    assert content_key(_task(QUESTIONS[0] + " ")) == content_key(_task(QUESTIONS[0], "eval"))
    assert content_key(_task(QUESTIONS[0])) != content_key(_task(QUESTIONS[0], answer="2"))


def test_decontaminate_removes_copies_and_near_duplicates() -> None:
    train, evals = _leaky_train()
    kept, report = decontaminate(train, evals)
    assert [t.prompt for t in kept] == OTHER
    assert len(report.removed_copies) == 2 and len(report.removed_near) == 1
    assert report.covered_eval == (evals[2].id,)


def test_load_task_sets_trains_on_none_of_the_eval_set(tmp_path: Path) -> None:
    train, evals = _leaky_train()
    cfg = TaskPoolConfig(
        sources=(TaskSourceConfig(source=str(_write(tmp_path / "train.jsonl", train))),),
        eval_sources=(TaskSourceConfig(source=str(_write(tmp_path / "eval.jsonl", evals))),),
    )
    pool, held_out = load_task_sets(cfg)
    assert sorted(t.prompt for t in pool.tasks) == sorted(OTHER)
    assert len(held_out) == len(QUESTIONS)
    assert pool.decontamination is not None
    assert pool.decontamination.metrics() == {
        "tasks/removed_eval_copies": 2.0,
        "tasks/removed_eval_near_dups": 1.0,
        "tasks/eval_covered_before": 1.0,
    }
