"""The CPU-sized SWE recipe: the bundled agent policy attempts real repository tasks for one step.

Episodes run tools in the repository's sandbox and end graded by the swe_tests verifier; the step's
metrics and trajectories hold no error."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trialground.orchestrator.run_config import load_config
from trialground.tasks.model import Task

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _one_step(recipe: str, tmp_path: Path, n_train: int, *extra: str) -> tuple[dict, list[dict], object]:
    """One step of `recipe` on the session's task set (brief statements): the step's metrics, its
    trajectories and the loaded config; every grading ran, none failed."""
    from trialground.orchestrator.loop import run

    overrides = [
        "tasks.sources=[{source: 'swe:inflection:3:brief'}]",  # the session's set, brief statements
        f"tasks.num_train={n_train}",
        "tasks.num_eval=1",
        "loop.steps=1",
        "loop.batch_tasks=1",
        "loop.samples_per_task=2",
        f"output_dir={tmp_path}",
        *extra,
    ]
    cfg = load_config(ROOT / "examples" / recipe, overrides)
    summary = asyncio.run(run(cfg))
    run_dir = Path(summary.run_dir)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    step = next(m for m in metrics if m.get("train/loss") is not None)
    assert step["verify/gradings"] >= 2 and step["verify/errors"] == 0
    rows = pq.read_table(run_dir / "trajectories" / "step_1.parquet").to_pylist()
    assert len(rows) == 2 and all(r["error_kind"] is None for r in rows), [r["error_message"] for r in rows]
    return step, rows, cfg


def test_one_step_of_the_cpu_recipe(tmp_path: Path, swe_tasks: list[Task]) -> None:
    _, rows, _ = _one_step("swe_cpu.yaml", tmp_path, len(swe_tasks), "env.max_turns=2", "name=swe")
    assert all(r["domain"] == "swe" for r in rows)


def test_the_bundled_repair_policy_uses_the_repair_tools(tmp_path: Path, swe_tasks: list[Task]) -> None:
    """examples/swe_fixes_cpu.yaml with its bundled policy (`tiny-fix`): the policy lists the candidates
    and applies one through the real tools, and each episode is graded."""
    _, rows, cfg = _one_step(
        "swe_fixes_cpu.yaml", tmp_path, len(swe_tasks), "env.max_turns=3", "loop.eval_sampled=0", "name=fx"
    )
    assert cfg.policy.model == "tiny-fix" and cfg.env.repair_tools  # type: ignore[attr-defined]
    calls = [r["completion"] for r in rows]  # the policy's turns and the tools' answers, in order
    assert all('"name": "fixes"' in c and '"name": "apply_fix"' in c for c in calls), calls
