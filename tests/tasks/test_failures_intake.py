"""`tasks from-failures` on OpenAI-format chat logs: candidates deduplicated against the pool and among
themselves, validated and audited; every dropped one is named with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trialground.cli import app
from trialground.tasks.failures import FailureRecord
from trialground.tasks.io import read_jsonl
from trialground.tasks.sources import load_source

runner = CliRunner()
CHECK = (
    "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"
)


def chat(question: str, wrong: str) -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": [{"type": "text", "text": question}]},
        {"role": "assistant", "content": wrong},
    ]


def test_a_chat_log_becomes_a_prompt_and_the_failed_response() -> None:
    record = FailureRecord.model_validate(
        {"messages": chat("What is 6 * 7?", "48"), "answer": "42", "origin": "review",
         "outcome": {"kind": "thumbs_down", "detail": "wrong product"}}
    )  # fmt: skip
    prompt, response = record.asked()
    assert prompt == "SYSTEM: You are a careful assistant.\n\nUSER: What is 6 * 7?" and response == "48"


@pytest.mark.slow  # the whole exploit library on a code candidate: ~20 s on a busy 2-core machine
def test_candidates_are_deduplicated_validated_and_audited(tmp_path: Path) -> None:
    pool_task = load_source("data", n=1)[0]
    records = [
        {"messages": chat("What is 6 * 7? Answer with the number.", "48"), "answer": "42", "origin": "chat",
         "outcome": {"kind": "thumbs_down"}},
        {"messages": chat("What is 6 * 7? Answer with the number.", "48"), "answer": "42", "origin": "chat"},
        {"prompt": "Write add(a, b) in solution.py returning a + b.", "check": CHECK, "origin": "ci",
         "reference": "def add(a, b):\n    return a + b\n",
         "outcome": {"kind": "failed_test", "detail": "test_add"}},
        {"prompt": "Write add(a, b) returning the sum, in solution.py please.", "check": CHECK,
         "origin": "ci", "outcome": {"kind": "exit_code", "detail": "1"}},
        {"prompt": pool_task.prompt, "files": pool_task.files, "answer": str(pool_task.reference),
         "origin": "chat", "domain": "data"},
    ]  # fmt: skip
    src = tmp_path / "failures.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "tasks.jsonl"
    res = runner.invoke(
        app,
        ["tasks", "from-failures", str(src), "--out", str(out), "--against", "data", "-n", "1", "--check"],
    )
    assert res.exit_code == 0, res.output
    kept = read_jsonl(out)
    assert sorted(t.metadata["failure_record"] for t in kept) == [1, 3]
    assert {t.metadata["outcome"] for t in kept} == {"thumbs_down", "failed_test"}
    assert "duplicate of an earlier candidate" in res.output
    assert "invalid: no reference solution" in res.output
    assert "of the pool" in res.output
