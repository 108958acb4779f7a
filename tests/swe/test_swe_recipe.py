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


def test_one_step_of_the_cpu_recipe(tmp_path: Path, swe_tasks: list[Task]) -> None:
    from trialground.orchestrator.loop import run

    overrides = [
        "tasks.sources=[{source: 'swe:inflection:3:brief'}]",  # the session's set, brief statements
        f"tasks.num_train={len(swe_tasks)}",
        "tasks.num_eval=1",
        "loop.steps=1",
        "loop.batch_tasks=1",
        "loop.samples_per_task=2",
        "env.max_turns=2",
        f"output_dir={tmp_path}",
        "name=swe",
    ]
    cfg = load_config(ROOT / "examples" / "swe_cpu.yaml", overrides)
    summary = asyncio.run(run(cfg))
    run_dir = Path(summary.run_dir)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    step = next(m for m in metrics if m.get("train/loss") is not None)
    assert step["verify/gradings"] >= 2 and step["verify/errors"] == 0
    rows = pq.read_table(run_dir / "trajectories" / "step_1.parquet").to_pylist()
    assert len(rows) == 2 and all(r["domain"] == "swe" for r in rows)
    assert all(r["error_kind"] is None for r in rows), [r["error_message"] for r in rows]
