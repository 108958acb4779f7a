"""Injected faults raise the right alert, with the right evidence, within a bounded number of steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from monkit import run_synthetic

FAULT_STEP = 100

# fault -> (rule, evidence key, statistic, most steps after the fault before it must fire)
EXPECTED = {
    "env_errors": ("env_anomaly", "env/error_rate", "cusum", 3),
    "backlog": ("backlog", "pool/queue_depth", "mann_kendall_p", 15),
    "verifier_drift": ("reward_drift", "canary/bad_pass_rate", "cusum", 20),
    "hacking": ("reward_eval_divergence", "reward/mean,eval/pass@1", "spearman", 45),
    "length_hack": ("response_length", "rollout/response_len_mean,reward/outcome_mean", "length_z", 5),
    "entropy_collapse": ("entropy_collapse", "train/entropy", "fraction_of_reference", 5),
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
@pytest.mark.parametrize("seed", [11, 12])
def test_fault_raises_its_alert_in_time(tmp_path: Path, fault: str, seed: int) -> None:
    rule, key, statistic, bound = EXPECTED[fault]
    alerts = run_synthetic(tmp_path, seed, fault, steps=FAULT_STEP + bound + 1)  # type: ignore[arg-type]
    before = [a for a in alerts if a.step < FAULT_STEP]
    assert not before, f"alerts before the fault: {[a.message for a in before]}"
    hits = [a for a in alerts if a.rule == rule and a.evidence.key == key]
    assert hits, f"{fault}: no {rule} alert on {key} within {bound} steps; got {[a.rule for a in alerts]}"
    first = hits[0]
    assert FAULT_STEP <= first.step <= FAULT_STEP + bound
    ev = first.evidence
    assert ev.statistic == statistic
    assert ev.values and ev.window[0] <= ev.window[1] <= first.step
    # The statistic is on the alarming side of its threshold.
    if statistic in ("mann_kendall_p", "fraction_of_reference", "spearman"):
        assert ev.value <= ev.threshold
    else:
        assert ev.value > ev.threshold


def test_evidence_details_of_a_sandbox_error_spike(tmp_path: Path) -> None:
    alerts = run_synthetic(tmp_path, 3, "env_errors", steps=FAULT_STEP + 5)
    a = next(a for a in alerts if a.evidence.key == "env/error_rate")
    d = a.evidence.details
    assert d["direction"] == "up"
    assert float(d["ref_mean"]) < 0.06 and float(d["post_mean"]) > 0.15
    assert float(d["change_step"]) >= FAULT_STEP
    assert a.action == "warn" and a.severity == "warning"


def test_hacking_divergence_evidence(tmp_path: Path) -> None:
    alerts = run_synthetic(tmp_path, 5, "hacking", steps=FAULT_STEP + 46)
    a = next(a for a in alerts if a.rule == "reward_eval_divergence")
    d = a.evidence.details
    assert float(d["train_rise"]) >= 0.1 and float(d["eval_change"]) <= 0.0
    assert a.evidence.value <= 0.0  # Spearman(train, eval)
    assert a.action == "pause"
    assert len(a.evidence.values) == 5


@pytest.mark.parametrize("seed", range(6))
def test_clean_runs_raise_no_alert(tmp_path: Path, seed: int) -> None:
    alerts = run_synthetic(tmp_path, 1000 + seed, None)
    assert alerts == [], [(a.step, a.rule, a.message) for a in alerts]


@pytest.mark.slow
def test_false_alarm_rate_over_clean_runs(tmp_path: Path) -> None:
    """A regression guard on the measured rate (3 % of 200 runs in docs/monitoring.md): at most 3 of 25."""
    noisy = [s for s in range(2000, 2025) if run_synthetic(tmp_path / str(s), s, None)]
    assert len(noisy) <= 3, noisy
