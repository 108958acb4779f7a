"""Statistics: detectors against known cases, pass@k against brute force, overlap, cost, regressions."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from trialground.monitor import detectors
from trialground.monitor.config import CostConfig
from trialground.monitor.cost import CostMeter, useful_tokens
from trialground.monitor.eval_stats import (
    EvalOutcome,
    outcomes_from_samples,
    pass_at_k,
    summarise,
)
from trialground.monitor.regressions import RegressionLog, read_events


def test_cusum_finds_shift_and_change_point() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, 50)
    recent = np.r_[rng.normal(0, 1, 5), rng.normal(3, 1, 5)]
    res = detectors.cusum(recent, ref, direction="both")
    assert res.direction == "up" and res.statistic > 8
    assert 4 <= res.change_index <= 6
    calm = detectors.cusum(rng.normal(0, 1, 10), ref)
    assert calm.statistic < 5


def test_ks_and_psi() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 400), rng.normal(0, 1, 400)
    _, p_same = detectors.ks(a, b)
    _, p_diff = detectors.ks(a, b + 1.0)
    assert p_same > 0.01 and p_diff < 1e-6
    same = [detectors.psi(rng.normal(0, 1, 400), rng.normal(0, 1, 400)) for _ in range(20)]
    assert float(np.mean(same)) < 0.1 < 0.25 < detectors.psi(a, b + 1.0)
    assert detectors.psi(np.zeros(30), np.full(5, 0.5)) > 0.25  # constant reference still separates


def test_trend_and_screen() -> None:
    x = np.arange(20)
    up = x * 0.5 + np.random.default_rng(2).normal(0, 0.5, 20)
    tr = detectors.trend(x, up)
    assert tr.p_value < 1e-4 and tr.tau > 0.6 and tr.slope_low < tr.slope < tr.slope_high
    assert detectors.plausible_upward_trend(up, 0.001)
    assert not detectors.plausible_upward_trend(-up, 0.001)
    assert detectors.trend(x, np.ones(20)).p_value == 1.0
    assert detectors.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert detectors.spearman([1, 1, 1], [3, 2, 1]) == 0.0


@pytest.mark.parametrize(
    ("n", "c", "k"), [(5, 2, 1), (5, 2, 3), (6, 0, 2), (6, 6, 4), (10, 3, 10), (4, 1, 2)]
)
def test_pass_at_k_matches_brute_force(n: int, c: int, k: int) -> None:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_pass_at_k_rejects_bad_k() -> None:
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        EvalOutcome("t", "d", 2, 3)


def test_summary_per_domain() -> None:
    outs = outcomes_from_samples(
        [
            ("a", "code", True),
            ("a", "code", False),
            ("b", "code", False),
            ("b", "code", False),
            ("c", "math", True),
        ]
    )
    m = summarise(outs, ks=(1, 2))
    assert m["eval/pass@1"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert m["eval/pass@1/code"] == pytest.approx(0.25)
    assert m["eval/pass@1/math"] == 1.0
    assert m["eval/pass@2"] == pytest.approx(0.5)  # task c has 1 sample: left out of pass@2
    assert "eval/pass@2/math" not in m and m["eval/n_tasks"] == 3


def test_cost_accounting() -> None:
    meter = CostMeter(
        CostConfig(sandbox_usd_per_hour=3.6, trainer_usd_per_hour=36.0, usd_per_million_tokens=1.0)
    )
    assert meter.update({"reward/mean": 1.0}) == {}
    m = meter.update(
        {
            "env/sandbox_s": 100.0,
            "rollout/generated_tokens": 1e6,
            "rollout/useful_tokens": 5e5,
            "train/step_s": 10,
        }
    )
    assert m["cost/sandbox_usd"] == pytest.approx(0.1)
    assert m["cost/generation_usd"] == pytest.approx(1.0)
    assert m["cost/trainer_usd"] == pytest.approx(0.1)
    assert m["cost/step_usd"] == pytest.approx(1.2)
    assert m["cost/per_useful_token_usd"] == pytest.approx(1.2 / 5e5)
    m2 = meter.update({"env/sandbox_s": 100.0, "rollout/generated_tokens": 0, "rollout/useful_tokens": 0})
    assert "cost/per_useful_token_usd" not in m2
    assert m2["cost/total_usd"] == pytest.approx(1.3) and m2["cost/sandbox_s_total"] == 200
    assert useful_tokens([0.5, 0.0, None, -1.0], [10, 20, 30, 40]) == 50


def test_regression_log_round_trip(tmp_path: Path) -> None:
    log = RegressionLog(tmp_path / "regressions.jsonl")
    log.queued(3, "a", "eval_failure", "pass@1=0")
    log.attempt(5, "a", True, 1.0)
    events = read_events(tmp_path / "regressions.jsonl")
    assert [e["event"] for e in events] == ["queued", "attempt"]
    assert json.loads((tmp_path / "regressions.jsonl").read_text().splitlines()[1])["solved"] is True
