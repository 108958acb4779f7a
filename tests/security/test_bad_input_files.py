"""Hostile input files for the CLI: invalid UTF-8 or broken JSON in a solutions, task or math JSONL file
is a usage error (exit 2) naming the file and the line, never a traceback. Runs the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trialground.errors import TaskError
from trialground.families.math.source import math_tasks
from trialground.tasks.io import read_jsonl, write_jsonl
from trialground.tasks.model import Task, VerifierSpec

ROOT = Path(__file__).resolve().parents[2]
BAD_UTF8 = b'{"task_id": "t", "solution": "x = \xff\xfe"}'


def tg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialground", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def _task() -> Task:
    return Task(
        domain="code",
        prompt="p",
        files={"solution.py": "x = 1\n"},
        hidden_checks={"test_h.py": "def test_x():\n    assert True\n"},
        verifier=VerifierSpec(kind="code_tests"),
    )


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    write_jsonl([_task()], path)
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [(BAD_UTF8, "not UTF-8 (byte 0xff at column 35)"), (b'{"task_id": ', "(json)")],
)
def test_bad_solutions_line_exits_2_naming_file_and_line(
    tasks_file: Path, tmp_path: Path, line: bytes, message: str
) -> None:
    task_id = read_jsonl(tasks_file)[0].id
    good = json.dumps({"task_id": task_id, "solution": "x = 1\n"}).encode()
    solutions = tmp_path / "solutions.jsonl"
    solutions.write_bytes(good + b"\n\n" + line + b"\n")
    r = tg("verify", str(tasks_file), "--solutions", str(solutions))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{solutions}:3:" in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_utf8_task_file_exits_2_naming_file_and_line(tasks_file: Path, tmp_path: Path) -> None:
    tasks_file.write_bytes(tasks_file.read_bytes() + b'{"prompt": "\xc3"}\n')
    with pytest.raises(TaskError, match=r"tasks.jsonl:2: not UTF-8"):
        read_jsonl(tasks_file)
    solutions = tmp_path / "solutions.jsonl"
    solutions.write_text("")
    r = tg("verify", str(tasks_file), "--solutions", str(solutions))
    assert r.returncode == 2 and f"{tasks_file}:2: not UTF-8" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_utf8_math_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "math.jsonl"
    path.write_bytes(b'{"problem": "1+1", "answer": "2"}\n{"problem": "\x80", "answer": "1"}\n')
    with pytest.raises(TaskError, match=r"math.jsonl:2: not UTF-8 \(byte 0x80"):
        math_tasks(path)
