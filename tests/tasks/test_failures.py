"""Recorded failures become validated tasks with provenance, and a run queues, draws and tracks them."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from trialground.errors import TaskError
from trialground.tasks.failures import tasks_from_failures
from trialground.tasks.sources import load_source

CHECK = (
    "from solution import f\n\n\ndef test_a():\n    assert f(41) == 42\n\n\n"
    "def test_b():\n    assert f(1) == 2\n"
)


def _write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_records_become_tasks_with_provenance(tmp_path: Path) -> None:
    src = _write(
        tmp_path / "f.jsonl",
        {"prompt": "fix f", "files": {"solution.py": "def f(x):\n    return x\n"}, "check": CHECK,
         "origin": "ticket-17", "response": "looks fine"},
        {"prompt": "What is 6*7?", "answer": "42", "origin": "chat log 2026-11-30", "response": "48"},
    )  # fmt: skip
    code, qa = tasks_from_failures(src)
    assert code.verifier.kind == "code_tests" and code.verifier.params["expected_tests"] == 2
    assert code.hidden_checks and not code.visible_checks and code.split == "train"
    assert code.metadata["origin"] == "ticket-17" and code.metadata["failure_record"] == 1
    assert qa.verifier.kind == "exact" and qa.metadata["failure_record"] == 2
    assert len({str(code.metadata["failure_sha"]), str(qa.metadata["failure_sha"])}) == 2


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "p", "origin": "o"}, "exactly one"),
        ({"prompt": "p", "origin": "o", "check": CHECK, "answer": "1"}, "exactly one"),
        ({"prompt": "p", "origin": "o", "check": "def broken(:\n"}, "does not parse"),
        ({"prompt": "p", "origin": "o", "check": "x = 1\n"}, "no test_"),
        ({"prompt": "p", "origin": "o", "answer": "4", "response": "4"}, "not a failure"),
        ({"prompt": "p", "answer": "4"}, "origin"),
        ({"prompt": "p", "origin": "o", "answer": "4", "extra": 1}, "extra"),
    ],
)
def test_bad_records_name_their_line(tmp_path: Path, record: dict, message: str) -> None:
    src = _write(tmp_path / "f.jsonl", {"prompt": "ok", "answer": "1", "origin": "o"}, record)
    with pytest.raises(TaskError, match=rf"f.jsonl:2: .*{message}"):
        tasks_from_failures(src)


def test_cli_writes_a_task_file_a_source_reads(tmp_path: Path) -> None:
    import subprocess

    src = _write(tmp_path / "f.jsonl", {"prompt": "What is 6*7?", "answer": "42", "origin": "log"})
    out = tmp_path / "online.jsonl"
    cmd = [sys.executable, "-m", "trialground", "tasks", "from-failures", str(src), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (task,) = load_source(str(out))
    assert task.metadata["origin"] == "log" and task.id in done.stdout
    bad = _write(tmp_path / "bad.jsonl", {"prompt": "p", "origin": "o"})
    done = subprocess.run(
        [*cmd[:5], str(bad), "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True
    )
    assert done.returncode == 2 and "bad.jsonl:1" in done.stderr and not (tmp_path / "x.jsonl").exists()


@pytest.mark.slow
def test_a_run_draws_them_and_tracks_their_pass_rate(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "loop"))
    from loopkit import answer_task, config, jsonl, metrics

    from trialground.orchestrator.loop import run
    from trialground.tasks.io import write_jsonl

    online = tmp_path / "online.jsonl"
    write_jsonl(
        tasks_from_failures(
            _write(tmp_path / "f.jsonl", {"prompt": "Say 7", "answer": "7", "origin": "log"})
        ),
        online,
    )
    tasks = [answer_task("train", "a", "1"), answer_task("eval", "e", "1")]
    cfg = config(
        tmp_path, tasks, ["7"], "name=online", f"tasks.regression_files=[{online}]", "loop.steps=2",
        "loop.batch_tasks=2", "tasks.regression_weight=1000",
    )  # fmt: skip
    asyncio.run(run(cfg))
    run_dir = tmp_path / "online"
    queued = [e for e in jsonl(run_dir / "regressions.jsonl") if e["event"] == "queued"]
    assert [e["reason"] for e in queued] == ["online_failure"] and "log" in queued[0]["detail"]
    trained = [r for r in metrics(run_dir) if "train/loss" in r]
    drew = [r for r in trained if "regressions/online_episodes" in r]
    assert drew and drew[0]["step"] == 1, "queued at the start, drawn at once (regression_weight 1000)"
    assert all(r["regressions/online_pass_rate"] == 1.0 for r in drew)  # the scripted policy says 7
    # passed regression_passes times: out of the queue, so later steps no longer draw it
    assert len(drew) < len(trained)
