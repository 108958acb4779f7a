"""The long-context recipe end to end: the bundled `tiny-nav` policy works a workspace ~100x its context
through `search` and paged `read_lines` in real sandboxes, and some of its groups have a gradient."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trialground.monitor.sinks.jsonl import read_metrics
from trialground.orchestrator.run_config import load_config

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

RECIPE = Path(__file__).resolve().parents[1] / "examples" / "longctx_cpu.yaml"


def test_the_policy_navigates_a_workspace_far_larger_than_its_context(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    small = ["loop.steps=2", "loop.eval_interval=0", "loop.batch_tasks=4", "tasks.num_train=24"]
    cfg = load_config(RECIPE, [*small, "tasks.num_eval=3", f"output_dir={tmp_path}", "name=longctx"])
    assert cfg.policy.model == "tiny-nav" and cfg.policy.max_context_tokens <= 1024
    summary = asyncio.run(run(cfg))
    run_dir = Path(summary.run_dir)
    steps = [m for m in read_metrics(run_dir / "metrics.jsonl") if m.get("train/loss") is not None]
    assert len(steps) == 2
    # the recipe evaluates both ways: greedy, and sampled at the training temperature (loop.eval_sampled)
    evals = [m for m in read_metrics(run_dir / "metrics.jsonl") if m.get("eval/pass@1") is not None]
    assert [m["step"] for m in evals] == [0, 2]
    assert all(m["eval_sampled/n_tasks"] == 3 and m["eval_sampled/infra_error_rate"] == 0 for m in evals)
    assert summary.sampled_before is not None and summary.sampled_after is not None
    for m in steps:
        assert m["context/workspace_to_context_min"] >= 100  # every workspace >= 100x the context
        assert m["context/tokens_max"] <= cfg.policy.max_context_tokens
    tables = [pq.read_table(run_dir / "trajectories" / f"step_{s}.parquet") for s in (1, 2)]
    rows = [r for table in tables for r in table.to_pylist()]
    assert all(r["error_kind"] is None for r in rows), [r["error_message"] for r in rows if r["error_kind"]]
    # it opens the workspace: most episodes search it, and some read a page of it
    searched = [r for r in rows if '"name": "search"' in r["completion"]]
    assert len(searched) >= len(rows) // 2, [r["completion"][:200] for r in rows[:3]]
    assert any('"name": "read_lines"' in r["completion"] for r in rows)
    assert sum(r["outcome"] > 0 for r in rows) > 0  # and solves some: a learning signal
