"""`trialground tasks list|show|export|validate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trialground.cli import app
from trialground.tasks.io import read_jsonl
from trialground.tasks.sources import load_source

runner = CliRunner()


def test_list_table_and_json() -> None:
    res = runner.invoke(app, ["tasks", "list", "math", "-n", "3"])
    assert res.exit_code == 0, res.output
    ids = [t.id for t in load_source("math", n=3)]
    assert all(i in res.stdout for i in ids) and "domain" in res.stdout
    res = runner.invoke(app, ["tasks", "list", "ops", "-n", "4", "--seed", "2", "--json"])
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["id"] for r in rows] == [t.id for t in load_source("ops", n=4, seed=2)]
    assert {"id", "domain", "split", "verifier", "prompt"} <= set(rows[0])


def test_show_by_id_prefix_and_name() -> None:
    task = load_source("humaneval")[7]
    for key in (task.id, task.id[:10], "HumanEval/7"):
        res = runner.invoke(app, ["tasks", "show", "humaneval", key])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout) == task.model_dump(mode="json")


def test_export_jsonl_and_dir_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "data.jsonl"
    res = runner.invoke(app, ["tasks", "export", "data", "-n", "5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert read_jsonl(out) == load_source("data", n=5)
    res = runner.invoke(app, ["tasks", "export", str(out), "--out", str(tmp_path / "dirs")])
    assert res.exit_code == 0, res.output
    assert load_source(str(tmp_path / "dirs")) == read_jsonl(out)
    res = runner.invoke(app, ["tasks", "export", "data", "-n", "1", "--out", str(tmp_path / "dirs")])
    assert res.exit_code == 2 and "not empty" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tasks", "list", "no_such_source"], "unknown task source"),
        (["tasks", "list", "math", "--split", "dev"], "--split must be train or eval"),
        (["tasks", "show", "math", "ffffffffffff"], "no task 'ffffffffffff'"),
        (["tasks", "list", "reasoning_gym:countdown"], "many correct answers"),
    ],
)
def test_errors_exit_2(args: list[str], message: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


def test_broken_file_error_names_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = load_source("math", n=1)[0].model_dump(mode="json")
    bad = {**good, "verifier": {"kind": "telepathy", "params": {}}}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    res = runner.invoke(app, ["tasks", "list", str(path)])
    assert res.exit_code == 2
    assert f"{path}:2: verifier.kind:" in "".join(res.output.split("\n"))


@pytest.mark.slow
def test_validate_runs_and_writes_report(tmp_path: Path) -> None:
    problems = tmp_path / "m.jsonl"
    problems.write_text(
        '{"problem": "What is 2+3?", "answer": "5"}\n{"problem": "What is 2*3?", "answer": "6"}\n'
    )
    report = tmp_path / "report.json"
    res = runner.invoke(
        app, ["tasks", "validate", f"math:{problems}", "--runs", "1", "--json-report", str(report)]
    )
    assert res.exit_code in (0, 1), res.output
    data = json.loads(report.read_text())
    assert len(data["tasks"]) == 2


@pytest.mark.slow
def test_validate_flags_overlap_with_eval_set(tmp_path: Path) -> None:
    leak = (
        "A train leaves the station at noon travelling at sixty miles per hour; how far has it gone by three "
        "in the afternoon?"
    )
    train = tmp_path / "train.jsonl"
    rows = [{"problem": leak, "answer": "180"}] + [
        {"problem": f"What is {i}*6?", "answer": str(6 * i)} for i in range(11)
    ]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(train.read_text().splitlines()[0] + "\n")
    report = tmp_path / "r.json"
    args = ["tasks", "validate", f"math:{train}", "--runs", "1", "--eval-set", f"math:{held_out}"]
    res = runner.invoke(app, [*args, "--json-report", str(report)])
    assert res.exit_code == 1, res.output
    data = json.loads(report.read_text())
    assert [f["kind"] for f in data["duplicates"]] == ["eval_overlap"]
