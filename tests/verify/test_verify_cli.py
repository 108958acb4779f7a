"""`trialground verify TASKS --solutions FILE [--json]`: one JSON line per solution, in order."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from trialground.cli import app
from trialground.families.humaneval.source import humaneval_tasks


def test_verify_json_lines_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tasks = humaneval_tasks()
    rows = [
        {"task_id": "HumanEval/0", "solution": tasks[0].reference},
        {"task_id": tasks[2].id, "solution": "import sys\ndef truncate_number(x):\n    sys.exit(0)\n"},
        {"task_id": "HumanEval/1", "solution": ""},
        {"task_id": "HumanEval/0", "solution": "pass"},
    ]
    path = tmp_path / "solutions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(
        app, ["verify", "humaneval", "--solutions", str(path), "--json", "--concurrency", "3"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["task_id"] for r in lines] == [r["task_id"] for r in rows]
    assert [r["passed"] for r in lines] == [True, False, False, False]
    assert lines[0]["reward"] == 1.0 and lines[1]["reward"] == 0.0
    assert lines[1]["flags"] == ["early_exit"]
    assert lines[0]["tests"][0] == {"name": "test_case_01", "outcome": "passed", "detail": ""}


def test_verify_bad_input_exits_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.jsonl"
    path.write_text('{"task_id": "HumanEval/9999", "solution": ""}\n')
    result = CliRunner().invoke(app, ["verify", "humaneval", "--solutions", str(path), "--json"])
    assert result.exit_code == 2
    path.write_text("not json\n")
    result = CliRunner().invoke(app, ["verify", "humaneval", "--solutions", str(path)])
    assert result.exit_code == 2
