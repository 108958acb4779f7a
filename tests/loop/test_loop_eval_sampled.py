"""`loop.eval_sampled`: each evaluation of a real run also samples the held-out split at the training
temperature, logged as `eval_sampled/*` beside the greedy `eval/*` and reported in the run's summary."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from loopkit import answer_task, config, metrics

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_every_evaluation_logs_sampled_pass_rates_beside_greedy(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    tasks = [answer_task("train", "a", "yes"), answer_task("train", "b", "no")]
    tasks += [answer_task("eval", f"e{i}", answer) for i, answer in enumerate(["yes", "no", "no", "no"])]
    cfg = config(tmp_path, tasks, ["yes"], "name=sampled", "loop.steps=2", "loop.eval_sampled=3")
    summary = asyncio.run(run(cfg))
    evals = [r for r in metrics(Path(summary.run_dir)) if "eval/pass@1" in r]
    assert [r["step"] for r in evals] == [0, 2]
    for row in evals:
        # the policy always answers "yes": one held-out task of four, in every sample
        assert row["eval/pass@1"] == 0.25
        assert row["eval_sampled/pass@1"] == 0.25 and row["eval_sampled/pass@3"] == 0.25
        assert row["eval_sampled/n_tasks"] == 4
        assert row["eval_sampled/infra_error_rate"] == 0.0
    assert summary.sampled_before == summary.sampled_after == 0.25
    assert summary.eval_before == 0.25


def test_sampled_evaluation_is_off_by_default(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    tasks = [answer_task("train", "a", "yes"), answer_task("eval", "e", "yes")]
    summary = asyncio.run(run(config(tmp_path, tasks, ["yes"], "name=greedy", "loop.steps=1")))
    rows = metrics(Path(summary.run_dir))
    assert any("eval/pass@1" in r for r in rows)
    assert not any(k.startswith("eval_sampled/") for r in rows for k in r)
    assert summary.sampled_before is None and summary.sampled_after is None
