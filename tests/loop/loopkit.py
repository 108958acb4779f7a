"""Small real runs of the training loop for the loop-level feature tests: task files, scripted policies,
reading the run directory back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from trialground.orchestrator.run_config import RunConfig, load_config
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = "from solution import f\n\n\ndef test_a():\n    assert f(41) == 42\n"
VISIBLE = "from solution import f\n\n\ndef test_one():\n    assert f(1) == 2\n"
GOOD = "def f(x):\n    return x + 1\n"
BAD = "def f(x):\n    return 0\n"


def code_task(split: str, name: str, *, tool: bool) -> Task:
    return Task(
        domain="code",
        prompt=f"Write f(x) in solution.py that returns x + 1 ({name}).",
        files={"solution.py": "def f(x):\n    raise NotImplementedError\n"} if tool else {},
        visible_checks={
            "test_visible.py": "from solution import f\n\n\ndef test_one():\n    assert f(1) == 2\n"
        }
        if tool
        else {},
        hidden_checks={"test_hidden.py": HIDDEN},
        reference=GOOD,
        verifier=VerifierSpec(
            kind="code_tests", params={"solution_path": "solution.py", "expected_tests": 1}
        ),
        split=split,  # type: ignore[arg-type]
        metadata={"name": name},
    )


def answer_task(split: str, name: str, answer: str) -> Task:
    return Task(
        domain="qa",
        prompt=f"Say {answer} ({name}).",
        reference=answer,
        verifier=VerifierSpec(kind="exact", params={"answer": answer, "extract": "whole"}),
        split=split,  # type: ignore[arg-type]
        metadata={"name": name, "source": "answers"},
    )


def tool_call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def config(tmp_path: Path, tasks: list[Task], responses: list[str], *extra: str) -> RunConfig:
    path = tmp_path / "tasks.jsonl"
    write_jsonl(tasks, path)
    overrides = [
        f"tasks.sources=[{{source: {path}}}]",
        "policy.backend=scripted",
        f"policy.responses={json.dumps(responses)}",
        "policy.max_context_tokens=4096",
        "policy.sampling.max_new_tokens=256",
        "policy.eval_sampling.max_new_tokens=256",
        "loop.eval_interval=0",
        "loop.batch_tasks=2",
        "loop.samples_per_task=4",
        "monitor.console=false",
        f"output_dir={tmp_path}",
        *extra,
    ]
    return load_config(ROOT / "examples" / "quickstart.yaml", overrides)


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def trained_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in metrics(run_dir) if "train/loss" in r]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def parquet_rows(run_dir: Path, step: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(run_dir / "trajectories" / f"step_{step}.parquet").to_pylist()
    return rows
