"""hf:PATH task sources and `tasks export --format hf`: real datasets written and read by `datasets`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reward_helpers import grade_and_score

pytest.importorskip("datasets")

import datasets
import pyarrow.parquet as pq

from trialground.errors import TaskError
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.hf_source import write_hf
from trialground.tasks.sources import load_source
from trialground.verify.grader import make_grader


@pytest.fixture(scope="module")
def mixed_tasks() -> list:
    # workspace files, visible and hidden checks, every verifier kind the generators make, both splits
    return [
        *load_source("agent", n=3),
        *load_source("math", n=2),
        *load_source("data", n=2, split="eval"),
        *load_source("codegen", n=2),
    ]


@pytest.mark.parametrize("name", ["saved", "tasks.parquet"])
def test_export_reads_back_as_the_same_tasks(tmp_path: Path, mixed_tasks: list, name: str) -> None:
    out = tmp_path / name
    write_hf(mixed_tasks, out)
    back = load_source(f"hf:{out}")
    assert [t.model_dump() for t in back] == [t.model_dump() for t in mixed_tasks]
    assert [t.id for t in load_source(f"hf:{out}", split="eval")] == [
        t.id for t in mixed_tasks if t.split == "eval"
    ]


def test_export_is_a_dataset_that_load_from_disk_opens(tmp_path: Path, mixed_tasks: list) -> None:
    write_hf(mixed_tasks, tmp_path / "ds")
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert len(ds) == len(mixed_tasks)
    assert ds[0]["prompt"] == mixed_tasks[0].prompt
    assert json.loads(ds[0]["files"]) == mixed_tasks[0].files


def test_cli_export_format_hf(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trialground.cli import app

    out = tmp_path / "ds"
    done = CliRunner().invoke(
        app, ["tasks", "export", "agent", "-n", "4", "--format", "hf", "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    listed = CliRunner().invoke(app, ["tasks", "list", f"hf:{out}", "--json"])
    assert listed.exit_code == 0, listed.output
    ids = [json.loads(line)["id"] for line in listed.stdout.splitlines() if line.startswith("{")]
    assert ids == [t.id for t in load_source("agent", n=4)]
    again = CliRunner().invoke(app, ["tasks", "export", "agent", "--format", "hf", "--out", str(out)])
    assert again.exit_code == 2 and "exists" in again.output


def _qa_dict(path: Path) -> None:
    train = datasets.Dataset.from_list(
        [
            {"question": "What is 6 * 7?", "final": 42, "level": 1},
            {"question": "What is 10 / 4?", "final": 2.5, "level": 2},
        ]
    )
    test = datasets.Dataset.from_list([{"question": "What is 2 + 2?", "final": 4, "level": 1}])
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(path))


async def test_mapping_builds_gradable_tasks(tmp_path: Path) -> None:
    _qa_dict(tmp_path / "qa")
    spec = f"hf:{tmp_path / 'qa'}?prompt=question&answer=final&verifier=numeric&metadata=level"
    tasks = load_source(spec)
    assert [t.prompt for t in tasks] == ["What is 6 * 7?", "What is 10 / 4?", "What is 2 + 2?"]
    assert [t.split for t in tasks] == ["train", "train", "eval"]  # the `test` part is eval
    assert tasks[1].verifier.kind == "numeric" and tasks[1].verifier.params["answer"] == 2.5
    assert tasks[0].metadata["level"] == 1
    assert [t.id for t in load_source(spec + "&part=test")] == [tasks[2].id]
    grader = make_grader(SandboxConfig())
    try:
        right, _ = await grade_and_score(grader, tasks[0], "6 * 7 makes\nAnswer: 42")
        wrong, _ = await grade_and_score(grader, tasks[0], "Answer: 41")
    finally:
        await grader.close()
    assert right.passed and not wrong.passed


def test_mapping_over_a_parquet_directory(tmp_path: Path) -> None:
    data = tmp_path / "hub" / "data"
    data.mkdir(parents=True)
    datasets.Dataset.from_list([{"q": "Name the capital of France.", "a": "Paris", "s": "eval"}]).to_parquet(
        str(data / "train-00000-of-00002.parquet")
    )
    datasets.Dataset.from_list([{"q": "What is $3^2$?", "a": "9", "s": "train"}]).to_parquet(
        str(data / "train-00001-of-00002.parquet")
    )
    exact = load_source(f"hf:{tmp_path / 'hub'}?prompt=q&answer=a&split=s")
    assert [(t.verifier.kind, t.split, t.reference) for t in exact] == [
        ("exact", "eval", "Paris"),
        ("exact", "train", "9"),
    ]
    math = load_source(f"hf:{tmp_path / 'hub'}?prompt=q&answer=a&verifier=math&split=train")
    assert math[1].verifier.kind == "math" and math[1].prompt.endswith("\\boxed{}.")
    assert {t.split for t in math} == {"train"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?prompt=question&answer=nope", "no column 'nope'; the dataset has question, final, level"),
        ("?prompt=question&answer=final&colour=red", "unknown key 'colour'"),
        ("?prompt=question&answer=final&verifier=judge", "verifier must be one of"),
        ("?prompt=question&answer=final&verifier=code_tests", "graded by their tests"),
        ("?prompt=question&answer=final&part=validation", "part 'validation' not in the dataset"),
        ("?prompt=question", "needs prompt=COLUMN and answer=COLUMN"),
        ("", "not a trialground task row"),
    ],
)
def test_bad_specs_say_what_is_wrong(tmp_path: Path, query: str, message: str) -> None:
    _qa_dict(tmp_path / "qa")
    with pytest.raises(TaskError, match=message):
        load_source(f"hf:{tmp_path / 'qa'}{query}")


def test_bad_paths_and_rows_are_named(tmp_path: Path, mixed_tasks: list) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_source(f"hf:{tmp_path / 'missing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="neither a save_to_disk directory nor Parquet"):
        load_source(f"hf:{tmp_path / 'empty'}")
    write_hf(mixed_tasks[:2], tmp_path / "rows.parquet")
    rows = pq.read_table(tmp_path / "rows.parquet").to_pylist()
    rows[1]["prompt"] += "!"  # edited without recomputing the id
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "edited.parquet"))
    with pytest.raises(TaskError, match=r"row 1: id: .* does not match the content hash"):
        load_source(f"hf:{tmp_path / 'edited.parquet'}")
