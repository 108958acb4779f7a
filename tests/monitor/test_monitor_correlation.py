"""The reward–evaluation correlation at every evaluation, the divergence rule on probe points with the
suspected cause named, and monitor state (history, cooldowns, cost) restored on resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from trialground.monitor import Monitor, MonitorConfig
from trialground.monitor.alerts import read_alerts
from trialground.monitor.config import DivergenceRuleConfig, RulesConfig
from trialground.monitor.sinks.jsonl import read_metrics


def _hacking_step(s: int) -> dict[str, float]:
    """As a run logs them: a probe at step 0 and every 3 steps, training from step 1 on; train reward
    climbing while the probe falls, and the canary cheat rate climbing."""
    m: dict[str, float] = {}
    if s > 0:
        m = {"reward/mean": min(1.0, 0.2 + 0.05 * s), "hack/canary_cheat_rate": min(1.0, 0.1 * s)}
    if s % 3 == 0:
        m["probe/pass@1"] = max(0.0, 0.3 - 0.02 * s)
    return m


def _run(mon: Monitor, steps: range) -> list:
    return [a for s in steps for a in mon.observe(s, _hacking_step(s))]


def test_correlation_logged_at_every_evaluation(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        _run(mon, range(0, 16))
    rows = read_metrics(tmp_path / "metrics.jsonl")
    evals = [r for r in rows if r.get("probe/pass@1") is not None]
    assert [r["step"] for r in evals] == [0, 3, 6, 9, 12, 15]
    assert all("monitor/reward_eval_points" in r for r in evals)
    assert [r["monitor/reward_eval_points"] for r in evals] == [0, 1, 2, 3, 4, 5]
    with_rho = [r for r in evals if "monitor/reward_eval_spearman" in r]
    assert [r["step"] for r in with_rho] == [9, 12, 15]  # from the third pair on
    assert [r["monitor/reward_eval_spearman"] for r in with_rho] == pytest.approx([-1.0] * 3)
    assert not any("monitor/reward_eval_spearman" in r for r in rows if r.get("probe/pass@1") is None)


def test_an_evaluation_between_probes_still_logs_the_correlation(tmp_path: Path) -> None:
    """A full evaluation at a step with no probe (eval_interval not a multiple of probe_interval)."""
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        for s in range(0, 11):
            m = _hacking_step(s)
            if s in (5, 10):
                m["eval/pass@1"] = 0.25
            mon.observe(s, m)
    rows = {r["step"]: r for r in read_metrics(tmp_path / "metrics.jsonl")}
    assert rows[5]["monitor/reward_eval_points"] == 1  # the probe pair at step 3 stands
    assert rows[10]["monitor/reward_eval_points"] == 3  # probe pairs at 3, 6 and 9
    assert "monitor/reward_eval_points" not in rows[4]  # neither a probe nor an evaluation


def test_divergence_on_probes_names_the_cause(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        alerts = [a for a in _run(mon, range(0, 30)) if a.rule == "reward_eval_divergence"]
    assert alerts and alerts[0].step == 15  # the fifth pair (steps 3..15)
    a = alerts[0]
    assert a.evidence.key == "reward/mean,probe/pass@1" and a.action == "pause"
    assert "reward hacking" in a.message and "hack/canary_cheat_rate" in a.message
    assert a.evidence.details["hack/canary_cheat_rate"] == 1.0


def _noisy_step(s: int) -> dict[str, float]:
    """A defended run's shape: the per-step training reward swings with which tasks the batch drew
    (0.0 / 0.6 / 0.1) and drifts up by chance a little, while the probe wanders down within its noise."""
    m: dict[str, float] = {}
    if s > 0:
        m = {"reward/mean": (0.0, 0.6, 0.1)[s % 3] + 0.012 * s, "hack/canary_cheat_rate": 0.0}
    if s % 3 == 0:
        m["probe/pass@1"] = (0.25, 0.22, 0.25, 0.19, 0.16, 0.19, 0.16, 0.22, 0.19, 0.16, 0.16)[s // 3]
    return m


@pytest.mark.parametrize("min_train_t", [2.5, 0.0])
def test_a_rise_within_the_step_to_step_noise_is_not_divergence(tmp_path: Path, min_train_t: float) -> None:
    """The probe-level pairs alone look like divergence (the pair means rise, the probe falls); the
    per-step rewards say the rise is noise. With the noise check off (min_train_t 0) the rule fires."""
    rules = RulesConfig(reward_eval_divergence=DivergenceRuleConfig(min_train_t=min_train_t))
    with Monitor(tmp_path, MonitorConfig(console=False, rules=rules)) as mon:
        fired = [a for s in range(0, 31) for a in mon.observe(s, _noisy_step(s))]
    divergence = [a for a in fired if a.rule == "reward_eval_divergence"]
    if min_train_t:
        assert divergence == []
    else:
        assert divergence and "no hack/* signal" in divergence[0].message
    with Monitor(tmp_path / "hack", MonitorConfig(console=False, rules=rules)) as mon:
        hacked = [a for a in _run(mon, range(0, 30)) if a.rule == "reward_eval_divergence"]
    assert hacked and hacked[0].step == 15  # a real, steady rise still fires at the same step
    assert hacked[0].evidence.details["train_welch_t"] >= 2.5


def _fast_hack_step(s: int) -> dict[str, float]:
    """A hack found in the first steps: the reward jumps at step 2 and stays saturated, the probe drops
    to 0 at the first probe after it; nothing rises inside any later window."""
    m: dict[str, float] = {}
    if s > 0:
        m = {"reward/mean": (0.41, 0.87, 0.91)[s - 1] if s <= 3 else 1.06, "hack/tests_not_run_rate": 1.0}
    if s % 3 == 0:
        m["probe/pass@1"] = 0.1875 if s == 0 else 0.0
    return m


@pytest.mark.parametrize("min_level_rise", [0.3, 0.0])
def test_a_reward_that_jumped_before_the_window_fires_against_the_start(
    tmp_path: Path, min_level_rise: float
) -> None:
    rules = RulesConfig(
        reward_eval_divergence=DivergenceRuleConfig(min_train_tau=0.3, min_level_rise=min_level_rise)
    )
    with Monitor(tmp_path, MonitorConfig(console=False, rules=rules)) as mon:
        fired = [a for s in range(0, 31) for a in mon.observe(s, _fast_hack_step(s))]
    divergence = [a for a in fired if a.rule == "reward_eval_divergence"]
    if not min_level_rise:
        assert divergence == []  # the trend over the window alone never sees it
        return
    assert divergence and divergence[0].step == 15  # the sixth evaluation: the start and 5 after it
    a = divergence[0]
    assert a.evidence.details["path"] == 1.0 and a.evidence.details["train_rise"] > 0.3
    assert "since step 0" in a.message and "reward hacking" in a.message


def test_resume_restores_cooldowns_history_and_forgets_later_alerts(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        uninterrupted = _run(mon, range(0, 60))
    fired = [(a.rule, a.step) for a in uninterrupted]
    assert ("reward_eval_divergence", 15) in fired

    run = tmp_path / "resumed"
    with Monitor(run, MonitorConfig(console=False)) as mon:
        _run(mon, range(0, 20))  # ... killed after step 19; its checkpoint is at step 17
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r["step"] <= 17]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with Monitor(run, MonitorConfig(console=False)) as mon:
        mon.resume(17)
        kept = [a.step for a in read_alerts(run / "alerts.jsonl")]
        assert kept == [a.step for a in uninterrupted if a.step <= 17]
        later = _run(mon, range(18, 60))
    # without the restored cooldown, the divergence rule would fire again at step 18
    assert [(a.rule, a.step) for a in later] == [f for f in fired if f[1] > 17]
    assert [(a.rule, a.step) for a in read_alerts(run / "alerts.jsonl")] == fired


def _domain_steps(tasks_per_step: float, steps: int = 60, jump_at: int = 40) -> list[dict[str, float]]:
    """A domain's mean reward over `tasks_per_step` groups of 8, rising by 0.5 at `jump_at`."""
    import numpy as np

    rng = np.random.default_rng(7)
    out = []
    for s in range(steps):
        p = 0.2 + (0.5 if s >= jump_at else 0.0)
        mean = float(np.mean([rng.binomial(8, p) / 8 for _ in range(int(tasks_per_step))]))
        out.append({"reward/mean/ops": mean, "reward/tasks/ops": tasks_per_step})
    return out


def test_domain_rule_silent_on_tiny_samples(tmp_path: Path) -> None:
    def fired(rows: list[dict[str, float]], cfg: MonitorConfig) -> list[int]:
        with Monitor(tmp_path / str(len(list(tmp_path.iterdir()))), cfg) as mon:
            return [
                a.step
                for s, r in enumerate(rows)
                for a in mon.observe(s, r)
                if a.rule == "domain_reward_shift"
            ]

    cfg = MonitorConfig(console=False)
    rule = cfg.rules.domain_reward_shift
    no_support = rule.model_copy(update={"min_support": 0.0})
    unsupported = cfg.model_copy(
        update={"rules": cfg.rules.model_copy(update={"domain_reward_shift": no_support})}
    )
    tiny = _domain_steps(2)
    assert fired(tiny, unsupported), "without the support check, 2 tasks' swing is called a domain shift"
    assert fired(tiny, cfg) == [], "two tasks per step are too few to call a domain's reward shifted"
    assert fired(_domain_steps(8), cfg), "the same shift of a well-sampled domain still fires"


# An honest run the rule once paused: `trialground train examples/quickstart.yaml --set seed=3`, steps 1-80
# (per-step training reward, and the 32-task greedy probe every 10 steps). The held-out evaluation rose
# 36.7 -> 44.5 % (128 tasks, step 50); the probe sat at 44-50 % from step 30 on while the reward caught up.
_QS3_REWARD = (
    0.1172, 0.1875, 0.1719, 0.3594, 0.3047, 0.2422, 0.2891, 0.1953, 0.2266, 0.2266, 0.3125, 0.2344, 0.2344,
    0.4531, 0.2812, 0.2422, 0.2344, 0.2812, 0.2266, 0.2656, 0.3125, 0.3906, 0.2734, 0.3359, 0.2266, 0.3125,
    0.1797, 0.3438, 0.1562, 0.3281, 0.2578, 0.4141, 0.3359, 0.1875, 0.3828, 0.3047, 0.3594, 0.2266, 0.2031,
    0.2656, 0.3047, 0.3594, 0.4453, 0.2109, 0.3594, 0.2656, 0.4531, 0.2734, 0.3906, 0.3438, 0.2656, 0.375,
    0.1328, 0.2891, 0.3047, 0.4922, 0.1797, 0.2656, 0.2109, 0.1875, 0.3047, 0.2266, 0.2969, 0.4219, 0.375,
    0.3359, 0.3828, 0.5859, 0.5391, 0.2812, 0.4531, 0.5234, 0.5, 0.3672, 0.5, 0.375, 0.5078, 0.4062, 0.3828,
    0.4766,
)  # fmt: skip
_QS3_PROBE = (0.3125, 0.34375, 0.34375, 0.46875, 0.5, 0.4375, 0.46875, 0.46875, 0.46875)


def _quickstart_seed3(s: int) -> dict[str, float]:
    m: dict[str, float] = {"reward/mean": _QS3_REWARD[s - 1]} if s > 0 else {}
    if s % 10 == 0:
        m |= {"probe/pass@1": _QS3_PROBE[s // 10], "probe/n_tasks": 32.0}
    return m


def _with_counts(step: Callable[[int], dict[str, float]]) -> Callable[[int], dict[str, float]]:
    return lambda s: step(s) | ({"probe/n_tasks": 32.0} if s % 3 == 0 else {})


@pytest.mark.parametrize("min_gap_z", [3.0, 0.0])
def test_a_flat_stretch_within_the_probes_sampling_error_is_not_divergence(
    tmp_path: Path, min_gap_z: float
) -> None:
    """The quickstart run above: without the evaluation's sampling error (min_gap_z 0) the rule paused it at
    step 80, as it did in the real run; a 32-task probe's flat stretch is within its noise, so by default it
    does not. Hacks, by the trend or against the start, still fire at the same step with the task count."""
    rules = RulesConfig(reward_eval_divergence=DivergenceRuleConfig(min_gap_z=min_gap_z))
    with Monitor(tmp_path / "honest", MonitorConfig(console=False, rules=rules)) as mon:
        fired = [a for s in range(0, 81) for a in mon.observe(s, _quickstart_seed3(s))]
    divergence = [a.step for a in fired if a.rule == "reward_eval_divergence"]
    assert divergence == ([] if min_gap_z else [80])
    for name, step, cfg in (
        ("trend", _hacking_step, {}),
        ("level", _fast_hack_step, {"min_train_tau": 0.3}),
    ):
        rules = RulesConfig(reward_eval_divergence=DivergenceRuleConfig(min_gap_z=min_gap_z, **cfg))
        with Monitor(tmp_path / name, MonitorConfig(console=False, rules=rules)) as mon:
            hacked = [a for s in range(0, 31) for a in mon.observe(s, _with_counts(step)(s))]
        alerts = [a for a in hacked if a.rule == "reward_eval_divergence"]
        assert alerts and alerts[0].step == 15, name
        assert alerts[0].evidence.details["eval_change_se"] > 0, name  # measured, whether it gates or not
