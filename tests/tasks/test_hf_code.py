"""hf:PATH?format=mbpp|apps: code datasets in the Hub's usual shapes become tasks the real grader grades."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reward_helpers import grade_and_score

pytest.importorskip("datasets")

import datasets

from trialground.errors import TaskError
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.grader import make_grader

# MBPP's own columns (the `full` config): text, code, test_list, test_setup_code, challenge_test_list
MBPP_ROWS = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character "
        "from the string.",
        "code": (
            "def remove_Occ(s, ch):\n"
            "    i = s.find(ch)\n"
            "    if i >= 0:\n"
            "        s = s[:i] + s[i + 1:]\n"
            "    j = s.rfind(ch)\n"
            "    if j >= 0:\n"
            "        s = s[:j] + s[j + 1:]\n"
            "    return s\n"
        ),
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 1001,
        "text": "Write a function that returns the area of a circle of radius r, scaled by FACTOR.",
        "code": "import math\n\ndef scaled_area(r, factor):\n    return math.pi * r * r * factor\n",
        # `math` is not imported by the tests (MBPP's originals ran in the solution's namespace)
        "test_list": [
            "assert math.isclose(scaled_area(1, FACTOR), 2 * math.pi)",
            "assert [round(scaled_area(r, FACTOR), 2) for r in (0, 2)] == [0, 25.13]",
        ],
        "test_setup_code": "FACTOR = 2",
        "challenge_test_list": [],
    },
]

WRONG_REMOVE = "def remove_Occ(s, ch):\n    return s.replace(ch, '', 1)\n"  # the first one only


def _mbpp(path: Path) -> None:
    rows = datasets.Dataset.from_list(MBPP_ROWS)
    datasets.DatasetDict({"train": rows.select([0]), "test": rows.select([1])}).save_to_disk(str(path))


async def test_mbpp_rows_are_graded_by_their_asserts(tmp_path: Path) -> None:
    _mbpp(tmp_path / "mbpp")
    tasks = load_source(f"hf:{tmp_path / 'mbpp'}?format=mbpp&metadata=task_id")
    assert [t.split for t in tasks] == ["train", "eval"]
    remove, area = tasks
    assert remove.verifier.kind == "code_tests"
    assert remove.verifier.params == {
        "solution_path": "solution.py",
        "expected_tests": 3,
        "entry_point": "remove_Occ",
    }
    assert remove.metadata == {"source": "hf", "format": "mbpp", "task_id": 11}
    assert remove.prompt.startswith(MBPP_ROWS[0]["text"])
    assert 'assert remove_Occ("hello","l") == "heo"' in remove.prompt  # the first test shows the name
    assert "abcda" not in remove.prompt  # the others stay hidden
    assert remove.reference == MBPP_ROWS[0]["code"]
    assert area.verifier.params["entry_point"] == "scaled_area"
    grader = make_grader(SandboxConfig())
    try:
        right, reward = await grade_and_score(grader, remove, MBPP_ROWS[0]["code"])
        wrong, _ = await grade_and_score(grader, remove, WRONG_REMOVE)
        area_right, _ = await grade_and_score(grader, area, MBPP_ROWS[1]["code"])
        area_wrong, _ = await grade_and_score(
            grader, area, "def scaled_area(r, factor):\n    return r * factor\n"
        )
        missing, _ = await grade_and_score(grader, area, "def area(r, factor):\n    return 0\n")
    finally:
        await grader.close()
    assert right.passed and reward.outcome == 1.0, right.detail
    assert [t.outcome for t in right.tests] == ["passed"] * 3
    assert not wrong.passed
    assert [t.outcome for t in wrong.tests] == ["failed"] * 3
    assert area_right.passed, area_right.detail
    assert not area_wrong.passed and not missing.passed


async def test_assert_text_and_custom_columns_from_jsonl(tmp_path: Path) -> None:
    # MBPP-like datasets under other names: one text of asserts, imports among them, a setup list
    row = {
        "problem": "Return the n-th triangular number.",
        "checks": "from functools import reduce\nassert tri(4) == 10\nassert tri(1) == reduce(max, [1])",
        "imports": ["import operator"],
    }
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    query = "verifier=code_tests&prompt=problem&tests=checks&setup=imports&show_tests=0"
    spec = f"hf:{tmp_path / 'rows.jsonl'}?{query}"
    [task] = load_source(spec)
    assert task.verifier.params["expected_tests"] == 2 and task.verifier.params["entry_point"] == "tri"
    assert "assert" not in task.prompt
    grader = make_grader(SandboxConfig())
    try:
        right, _ = await grade_and_score(grader, task, "def tri(n):\n    return n * (n + 1) // 2\n")
        wrong, _ = await grade_and_score(grader, task, "def tri(n):\n    return n * n\n")
    finally:
        await grader.close()
    assert right.passed, right.detail
    assert not wrong.passed


APPS_ROWS = [
    {
        "problem_id": 1,
        "question": "Read two integers a and b on one line and print their sum.",
        "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
        "input_output": json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7\n"]}),
    },
    {
        "problem_id": 2,
        "question": "Write count_vowels(s) returning how many vowels s holds.",
        "solutions": json.dumps(["def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n"]),
        "input_output": json.dumps(
            {"fn_name": "count_vowels", "inputs": [["banana"], ["xyz"]], "outputs": [[3], [0]]}
        ),
    },
]


async def test_apps_rows_run_programs_and_calls(tmp_path: Path) -> None:
    datasets.Dataset.from_list(APPS_ROWS).to_parquet(str(tmp_path / "apps.parquet"))
    stdio, call = load_source(f"hf:{tmp_path / 'apps.parquet'}?format=apps&split=eval")
    assert stdio.verifier.kind == "check_program" and sorted(stdio.hidden_checks) == [
        "check_01.py",
        "check_02.py",
    ]
    assert "input:\n1 2\n" in stdio.prompt and "10 -3" not in stdio.prompt
    assert call.verifier.kind == "code_tests" and call.verifier.params["entry_point"] == "count_vowels"
    assert stdio.reference == json.loads(APPS_ROWS[0]["solutions"])[0]
    grader = make_grader(SandboxConfig())
    try:
        right, _ = await grade_and_score(grader, stdio, str(stdio.reference))
        wrong, _ = await grade_and_score(grader, stdio, "a, b = map(int, input().split())\nprint(a - b)\n")
        call_right, _ = await grade_and_score(grader, call, str(call.reference))
        call_wrong, _ = await grade_and_score(grader, call, "def count_vowels(s):\n    return len(s)\n")
    finally:
        await grader.close()
    assert right.passed, right.detail
    assert not wrong.passed and "case 2: expected ['7'], got ['13']" in wrong.tests[1].detail
    assert call_right.passed, call_right.detail
    assert not call_wrong.passed


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?format=humaneval", "format must be one of mbpp, apps"),
        ("?format=mbpp&answer=code", "drop verifier= and answer="),
        ("?format=mbpp&tests=nope", "no column 'nope'"),
        ("?verifier=code_tests&prompt=text", r"name the tests column \(tests=COLUMN\)"),
        ("?format=mbpp&show_tests=-1", "show_tests must be a count"),
        ("?prompt=text&answer=code&tests=test_list", "tests go with code tasks"),
    ],
)
def test_bad_code_mappings_say_what_is_wrong(tmp_path: Path, query: str, message: str) -> None:
    _mbpp(tmp_path / "mbpp")
    with pytest.raises(TaskError, match=message):
        load_source(f"hf:{tmp_path / 'mbpp'}{query}")


def test_a_row_whose_tests_call_nothing_is_named(tmp_path: Path) -> None:
    row = {"text": "Anything.", "test_list": ["assert 1 + 1 == 2"]}
    datasets.Dataset.from_list([row]).to_parquet(str(tmp_path / "x.parquet"))
    with pytest.raises(TaskError, match=r"row 0: test_list: the tests call no function of the submission"):
        load_source(f"hf:{tmp_path / 'x.parquet'}?format=mbpp")


def test_a_hub_name_says_how_to_make_a_local_copy() -> None:
    with pytest.raises(TaskError) as info:
        load_source("hf:openai/gsm8k?prompt=question&answer=answer")
    message = str(info.value)
    assert "looks like a Hugging Face Hub name" in message
    assert "only local datasets (a save_to_disk directory, a .parquet or .jsonl file" in message
    assert "datasets.load_dataset('openai/gsm8k').save_to_disk('data/gsm8k')" in message
    assert "hf download openai/gsm8k --repo-type dataset --local-dir data/gsm8k" in message
    assert message.endswith("then use hf:data/gsm8k")
