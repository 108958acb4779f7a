"""Task sources: counts, determinism, disjoint splits, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trialground.errors import TaskError
from trialground.tasks.io import write_jsonl, write_task_dirs
from trialground.tasks.sources import load_source

GENERATED = [
    "data",
    "ops",
    "reasoning_gym:chain_sum",
    "reasoning_gym:gcd",
    "reasoning_gym:chain_sum?max_terms=2&max_digits=2",
    "codegen",
]


@pytest.mark.parametrize("spec", GENERATED)
def test_generators_count_determinism_and_splits(spec: str) -> None:
    a = load_source(spec, seed=3, n=25)
    b = load_source(spec, seed=3, n=25)
    assert len(a) == 25
    assert [t.id for t in a] == [t.id for t in b]
    assert len({t.id for t in a}) == 25
    assert all(t.split == "train" for t in a)
    other_seed = load_source(spec, seed=4, n=25)
    assert [t.id for t in other_seed] != [t.id for t in a]
    evals = load_source(spec, seed=3, n=20, split="eval")
    assert len(evals) == 20 and all(t.split == "eval" for t in evals)
    # train and eval never share a task, even across seeds
    assert not {t.id for t in evals} & {t.id for t in a} | {t.id for t in other_seed} & {t.id for t in evals}
    assert all(t.reference for t in a)


def test_humaneval_all_164() -> None:
    tasks = load_source("humaneval")
    assert len(tasks) == 164
    assert len({t.id for t in tasks}) == 164
    assert {t.split for t in tasks} == {"eval"}
    assert load_source("humaneval", split="train") == []
    names = [t.metadata["name"] for t in tasks]
    assert names[0] == "HumanEval/0" and names[-1] == "HumanEval/163"
    for t in tasks:
        assert t.verifier.kind == "code_tests"
        n = t.verifier.params["expected_tests"]
        assert n >= 1
        assert t.hidden_checks["test_hidden.py"].count("\ndef test_") == n
        assert t.reference and t.reference.splitlines()[0] in t.prompt  # prompt code + canonical body
        assert t.metadata["entry_point"] in t.reference
    assert sum(bool(t.visible_checks) for t in tasks) >= 60
    assert sum(t.verifier.params["expected_tests"] for t in tasks) > 1000  # asserts split into named tests


def test_math_bundled_and_file(tmp_path: Path) -> None:
    tasks = load_source("math")
    assert len(tasks) >= 20
    assert all(t.verifier.kind == "math" and t.verifier.params["answer"] for t in tasks)
    assert {t.split for t in tasks} == {"train", "eval"}
    path = tmp_path / "m.jsonl"
    path.write_text(
        json.dumps({"problem": "1+1?", "answer": 2, "level": 1})
        + "\n\n"
        + json.dumps({"problem": "2+2?", "answer": "4", "split": "eval"})
        + "\n"
    )
    got = load_source(f"math:{path}")
    assert [t.verifier.params["answer"] for t in got] == ["2", "4"]
    assert got[0].metadata["level"] == 1 and got[1].split == "eval"
    assert [t.reference for t in got] == ["\\boxed{2}", "\\boxed{4}"]
    assert load_source(f"math:{path}", split="eval") == [got[1]]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"problem": "x"}', ":2: answer: required"),
        ('{"answer": "1"}', ":2: problem: required"),
        ('{"problem": "x", "answer": "1", "split": "dev"}', ":2: split:"),
        ('{"problem": "x", "answer": "1", "tags": ["a"]}', ":2: tags:"),
        ("not json", ":2: (json)"),
    ],
)
def test_math_file_errors_name_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"problem": "ok", "answer": "1"}\n' + line + "\n")
    with pytest.raises(TaskError) as err:
        load_source(f"math:{path}")
    assert str(err.value).startswith(f"{path}{message}"), str(err.value)


def test_file_and_directory_sources(tmp_path: Path) -> None:
    tasks = load_source("data", n=4) + load_source("math", split="eval")
    write_jsonl(tasks, tmp_path / "t.jsonl")
    assert load_source(str(tmp_path / "t.jsonl")) == tasks
    assert load_source(str(tmp_path / "t.jsonl"), n=2) == tasks[:2]
    assert load_source(str(tmp_path / "t.jsonl"), split="eval") == [t for t in tasks if t.split == "eval"]
    write_task_dirs(tasks, tmp_path / "dirs")
    assert load_source(str(tmp_path / "dirs")) == tasks


def test_source_errors() -> None:
    with pytest.raises(TaskError, match="unknown task source 'nonsense'"):
        load_source("nonsense")
    with pytest.raises(TaskError, match="reasoning_gym: name an argument"):
        load_source("reasoning_gym")
    with pytest.raises(TaskError, match="data takes no argument"):
        load_source("data:extra")
    with pytest.raises(TaskError, match="many correct answers"):
        load_source("reasoning_gym:countdown")
    with pytest.raises(TaskError, match="reasoning-gym has no dataset"):
        load_source("reasoning_gym:no_such_dataset")
    with pytest.raises(TaskError, match="n must be >= 1"):
        load_source("data", n=0)
    with pytest.raises(TaskError):
        load_source("math:/does/not/exist.jsonl")


def test_reasoning_gym_options_configure_the_dataset_and_bad_ones_are_named() -> None:
    tasks = load_source("reasoning_gym:chain_sum?max_terms=2&max_digits=1&min_digits=1", n=30)
    for t in tasks:
        expr = t.prompt.split("problem: ")[1].split(" =")[0]
        a, op, b = expr.split()
        assert len(a) == len(b) == 1 and op in "+-", expr
        assert int(t.reference) == int(a) + (int(b) if op == "+" else -int(b))
    assert {t.id for t in tasks}.isdisjoint(t.id for t in load_source("reasoning_gym:chain_sum", n=30))
    with pytest.raises(TaskError, match=r"refuses the options.*max_term"):
        load_source("reasoning_gym:chain_sum?max_term=2")
    with pytest.raises(TaskError, match="refuses the options"):
        load_source("reasoning_gym:chain_sum?min_terms=3&max_terms=2")
    with pytest.raises(TaskError, match="'max_terms' is not key=value"):
        load_source("reasoning_gym:chain_sum?max_terms")
    with pytest.raises(TaskError, match="repeated or reserved"):
        load_source("reasoning_gym:chain_sum?seed=4")


def test_verifier_params_match_the_verify_contract() -> None:
    for t in load_source("data", n=30):
        p = t.verifier.params
        assert t.verifier.kind in ("numeric", "exact") and "answer" in p
        assert t.files and t.reference
    for t in load_source("reasoning_gym:leg_counting", n=20):
        assert t.verifier.kind == "exact" and t.verifier.params["answer"] == t.reference
    for t in load_source("ops", n=21):
        p = t.verifier.params
        assert t.verifier.kind == "check_program"
        assert p["solution_path"] in t.files and t.reference != t.files[p["solution_path"]]
        assert len(t.hidden_checks) == 1 and "program" not in p  # every hidden check runs; none is named
