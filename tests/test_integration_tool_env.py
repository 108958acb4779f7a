"""The loop's evaluation path with multi-turn tool episodes: a scripted agent edits, tests and submits
in a real sandbox from the environment pool, and the hidden tests decide. Locally and on a Ray cluster."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from trialground.orchestrator.run_config import load_config
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec

pytest.importorskip("transformers")


def code_task(split: str, name: str) -> Task:
    return Task(
        domain="code",
        prompt=f"Write f(x) in solution.py that returns x + 1 ({name}).",
        files={"solution.py": "def f(x):\n    raise NotImplementedError\n"},
        visible_checks={
            "test_visible.py": "from solution import f\n\n\ndef test_one():\n    assert f(1) == 2\n"
        },
        hidden_checks={
            "test_hidden.py": "from solution import f\n\n\ndef test_a():\n    assert f(41) == 42\n\n\n"
            "def test_b():\n    assert f(-5) == -4\n"
        },
        reference="def f(x):\n    return x + 1\n",
        verifier=VerifierSpec(
            kind="code_tests", params={"solution_path": "solution.py", "expected_tests": 2}
        ),
        split=split,  # type: ignore[arg-type]
        metadata={"name": name},
    )


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def config(tmp_path: Path, solution: str, *extra: str):  # type: ignore[no-untyped-def]
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl([code_task("train", "t"), code_task("eval", "e")], tasks)
    script = [
        call("bash", command="ls"),
        call("write_file", path="solution.py", content=solution),
        call("run_tests"),
        call("submit"),
    ]
    overrides = [
        f"tasks.sources=[{{source: {tasks}}}]",
        "env.kind=tool",
        "env.max_turns=6",
        "policy.backend=scripted",
        f"policy.responses={json.dumps(script)}",
        "policy.max_context_tokens=4096",
        "policy.eval_sampling.max_new_tokens=256",
        f"output_dir={tmp_path}",
        *extra,
    ]
    return load_config(Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml", overrides)


@pytest.mark.parametrize(
    ("solution", "expected"), [("def f(x):\n    return x + 1\n", 1.0), ("def f(x):\n    return 2\n", 0.0)]
)
def test_tool_episodes_are_graded_by_hidden_tests(tmp_path: Path, solution: str, expected: float) -> None:
    from trialground.orchestrator.evaluate_run import evaluate_run

    metrics = asyncio.run(evaluate_run(config(tmp_path, solution)))
    assert metrics["eval/infra_error_rate"] == 0.0
    assert metrics["eval/pass@1"] == expected


@pytest.mark.ray
@pytest.mark.slow
def test_same_program_on_a_local_ray_cluster(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from trialground.orchestrator.evaluate_run import evaluate_run

    cfg = config(tmp_path, "def f(x):\n    return x + 1\n", "cluster=ray")
    metrics = asyncio.run(evaluate_run(cfg))
    assert metrics["eval/infra_error_rate"] == 0.0
    assert metrics["eval/pass@1"] == 1.0
