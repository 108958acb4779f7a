"""`loop.branch` in the real training loop: scripted tool episodes in pooled bwrap sandboxes, branched
groups trained by the real trainer, branch metrics logged per step, in sync and async mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trialground.errors import ConfigError
from trialground.orchestrator.run_config import load_config
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BRANCH_KEYS = (
    "rollout/branch_groups",
    "rollout/branch_fallbacks",
    "rollout/branch_prefix_tokens_mean",
    "rollout/branch_sandbox_s_saved",
    "rollout/sandbox_s_per_sample",
    "rollout/generated_tokens_per_sample",
)


def code_task(split: str, name: str) -> Task:
    return Task(
        domain="code",
        prompt=f"Write f(x) in solution.py that returns x + 1 ({name}).",
        files={"solution.py": "def f(x):\n    raise NotImplementedError\n"},
        visible_checks={
            "test_visible.py": "from solution import f\n\n\ndef test_one():\n    assert f(1) == 2\n"
        },
        hidden_checks={
            "test_hidden.py": "from solution import f\n\n\ndef test_a():\n    assert f(41) == 42\n"
        },
        verifier=VerifierSpec(
            kind="code_tests", params={"solution_path": "solution.py", "expected_tests": 1}
        ),
        split=split,  # type: ignore[arg-type]
        metadata={"name": name},
    )


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def config(tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl([code_task("train", "a"), code_task("train", "b"), code_task("eval", "e")], tasks)
    # Cycled over every generation of the run, so episodes differ: some solve, some do not.
    script = [
        call("run_tests"),
        call("write_file", path="solution.py", content="def f(x):\n    return x + 1\n"),
        call("bash", command="cat solution.py"),
        call("submit"),
        call("write_file", path="solution.py", content="def f(x):\n    return 0\n"),
    ]
    overrides = [
        f"tasks.sources=[{{source: {tasks}}}]",
        "env.kind=tool",
        "env.max_turns=4",
        "policy.backend=scripted",
        f"policy.responses={json.dumps(script)}",
        "policy.max_context_tokens=4096",
        "policy.sampling.max_new_tokens=256",
        "policy.eval_sampling.max_new_tokens=256",
        "loop.steps=2",
        "loop.eval_interval=0",
        "loop.batch_tasks=2",
        "loop.samples_per_task=4",
        "loop.branch_k=2",
        f"output_dir={tmp_path}",
        *extra,
    ]
    return load_config(ROOT / "examples" / "quickstart.yaml", overrides)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_branched_training_steps_log_branch_metrics(tmp_path: Path, mode: str) -> None:
    from trialground.orchestrator.loop import run

    cfg = config(tmp_path, "loop.branch=first_obs", f"loop.mode={mode}", f"name={mode}")
    summary = asyncio.run(run(cfg))
    assert summary.steps == 2
    run_dir = Path(summary.run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in rows if r["step"] >= 1 and "train/loss" in r]
    assert len(steps) == 2
    for r in steps:
        for key in BRANCH_KEYS:
            assert key in r, key
        # 2 tasks x (4 samples / branch_k 2) = 4 trunks per step: each branched or fell back
        assert r["rollout/branch_groups"] + r["rollout/branch_fallbacks"] == 4
        assert r["rollout/trajectories"] == 8
        assert r["env/error_rate"] == 0.0
    assert sum(r["rollout/branch_groups"] for r in steps) > 0
    table = pq.read_table(run_dir / "trajectories" / "step_1.parquet").to_pylist()
    assert len(table) == 8
    # each trunk is its own group (of branch_k); the eval at the end ran without branching
    per_group: dict[str, int] = {}
    for row in table:
        per_group[row["group_id"]] = per_group.get(row["group_id"], 0) + 1
    assert sorted(per_group.values()) == [2, 2, 2, 2]
    assert "eval/pass@1" in rows[-1]


def test_off_mode_logs_the_cost_keys_but_no_branch_keys(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    summary = asyncio.run(run(config(tmp_path, "loop.steps=1", "loop.branch_k=null", "name=independent")))
    rows = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/loss" in r][-1]
    assert trained["rollout/sandbox_s_per_sample"] > 0 and trained["rollout/generated_tokens_per_sample"] > 0
    assert not any(k.startswith("rollout/branch_") for k in trained)


def test_branch_k_must_divide_the_group_size(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"branch_k=3 must divide loop\.samples_per_task=4"):
        config(tmp_path, "loop.branch=first_obs", "loop.branch_k=3")
    with pytest.raises(ConfigError, match=r"loop\.branch"):
        config(tmp_path, "loop.branch=sometimes")
    assert config(tmp_path, "loop.branch=off").loop.branch == "off"  # YAML's bare off is False


@pytest.mark.ray
@pytest.mark.slow
def test_branched_loop_with_sandboxes_on_ray_actors(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from trialground.orchestrator.loop import run

    cfg = config(tmp_path, "cluster=ray", "loop.branch=first_obs", "loop.steps=1", "name=ray")
    summary = asyncio.run(run(cfg))
    rows = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/loss" in r][-1]
    assert trained["env/error_rate"] == 0.0
    assert trained["rollout/branch_groups"] + trained["rollout/branch_fallbacks"] == 4
    assert trained["rollout/branch_groups"] > 0
