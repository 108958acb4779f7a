"""Dedup finds planted exact duplicates, near-duplicates and eval-set overlap, and stays quiet otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from trialground.families.humaneval.source import humaneval_tasks
from trialground.tasks.dedup import (
    MinHasher,
    eval_contamination,
    eval_overlap,
    exact_duplicates,
    find_duplicates,
    jaccard,
    near_duplicates,
    shingles,
)
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.sources import load_source

STORY = (
    "A farmer has a rectangular field whose length is three times its width and whose perimeter is "
    "{p} meters. The farmer plants apple trees along the border every {s} meters, starting at a corner. "
    "How many apple trees does the farmer plant in total around the whole field?"
)


def _task(prompt: str, answer: str = "1") -> Task:
    return Task(domain="math", prompt=prompt, verifier=VerifierSpec(kind="math", params={"answer": answer}))


def test_exact_duplicates_same_task_and_same_prompt() -> None:
    base = load_source("math")
    planted = [*base, base[3], _task(base[7].prompt, answer="something else")]
    found = exact_duplicates(planted)
    kinds = {f.kind: f for f in found}
    assert set(kinds) == {"same_task", "same_prompt"}
    assert kinds["same_task"].task_ids == (base[3].id, base[3].id)
    assert set(kinds["same_prompt"].task_ids) == {base[7].id, planted[-1].id}
    assert exact_duplicates(base) == []


def test_near_duplicates_found_and_clean_sets_stay_clean() -> None:
    originals = [_task(f"Question {i}: " + " ".join(f"w{i}_{k}" for k in range(40))) for i in range(30)]
    edited = _task(STORY.format(p=80, s=5).replace("apple", "pear"))
    story = _task(STORY.format(p=80, s=5))
    unrelated = _task(STORY.format(p=120, s=4).replace("farmer", "gardener").replace("apple", "cherry"))
    found = near_duplicates([*originals, story, edited, unrelated], threshold=0.6)
    assert len(found) == 1
    assert set(found[0].task_ids) == {story.id, edited.id}
    assert 0.6 <= found[0].similarity < 1.0
    assert near_duplicates(humaneval_tasks()) == []
    assert near_duplicates(load_source("math")) == []
    # generated families share whole files (a service's source): those do not make tasks alike
    assert near_duplicates(load_source("ops", n=60)) == []
    assert near_duplicates(load_source("data", n=100)) == []


def test_minhash_estimates_jaccard() -> None:
    a = shingles(" ".join(f"t{i}" for i in range(200)), 3)
    b = shingles(" ".join(f"t{i}" for i in range(50, 250)), 3)
    hasher = MinHasher(256, seed=1)
    est = float(np.mean(hasher.signature(a) == hasher.signature(b)))
    assert est == pytest.approx(jaccard(a, b), abs=0.08)


def test_eval_overlap_finds_contaminated_task() -> None:
    he = humaneval_tasks()
    train = load_source("data", n=40)
    leaked = _task("Please solve this one:\n" + he[12].prompt.split("```python", 1)[1], answer="x")
    found = eval_overlap([*train, leaked], he, eval_name="humaneval")
    assert [f.task_ids for f in found] == [(leaked.id,)]
    assert found[0].eval_ids[0] == he[12].id
    assert "humaneval" in found[0].detail
    assert eval_overlap(train, he) == []


def test_find_duplicates_combines() -> None:
    base = load_source("math")
    found = find_duplicates([*base, base[0]], eval_tasks=[base[1]], eval_name="m")
    assert {f.kind for f in found} == {"same_task", "eval_overlap"}


def test_eval_contamination_tells_template_instances_from_leaks() -> None:
    """Agent families share one prompt template: held-out instances (another key, table, broken line) are
    not contamination; an eval instance copied into training under a reworded prompt is."""
    train = load_source("agent", n=300, split="train")
    evals = load_source("agent", n=24, split="eval")
    clean = eval_contamination(train, evals)
    assert clean.same_id == () and clean.near_dup_frac <= 0.1, clean
    leak = evals[5].model_copy(update={"id": "", "prompt": "Please: " + evals[5].prompt, "split": "train"})
    leak = type(leak).model_validate(leak.model_dump(exclude={"id"}))
    dirty = eval_contamination([*train, leak, evals[7]], evals)
    assert dirty.same_id == (evals[7].id,)
    assert evals[5].id in dirty.covered
    assert dirty.near_dup_frac > clean.near_dup_frac
