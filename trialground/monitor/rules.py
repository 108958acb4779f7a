"""Alert rules over the metric history. Each rule watches documented metric keys and returns `Alert`s.

Metric keys the default rules read (missing keys simply keep a rule silent):

| key | meaning | rule |
|---|---|---|
| `env/error_rate`, `env/timeout_rate` | share of sandbox executions erroring / timing out | env_anomaly |
| `pool/queue_depth`, `pool/wait_p99_s` | tasks waiting (time-weighted, last minute); p99 wait (s) | backlog |
| `canary/<name>` | canary submissions re-scored (e.g. `canary/good_pass_rate`) | reward_drift |
| `verify/error_rate/<source>` | verifier infrastructure error rate per task source | reward_drift |
| `reward/mean/<domain>` | mean training reward per domain | domain_reward_shift |
| `reward/mean`, `eval/pass@1` | training reward; held-out pass@1 (eval steps) | reward_eval_divergence |
| `hack/flag_rate` | share of trajectories the hack detectors flagged | hack_flag_rate |
| `rollout/response_len_mean`, `reward/outcome_mean` | mean response tokens; share passed | response_length |
| `rollout/clip_ratio` | share of responses cut at the token budget | clip_ratio |
| `train/zero_var_group_frac` | share of groups whose rewards are all equal | zero_var_groups |
| `train/entropy` | mean policy entropy | entropy_collapse |
| `verify/judge_disagreement` | share where rule verifier and judge disagree | judge_disagreement |

Keys are configurable per rule (`monitor.rules.<rule>.keys`, fnmatch patterns). A rule that fired for a
key stays quiet on that key for its `cooldown` steps.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from trialground.monitor import detectors
from trialground.monitor.alerts import Alert, Evidence
from trialground.monitor.config import (
    CollapseRuleConfig,
    DivergenceRuleConfig,
    LengthRuleConfig,
    RulesConfig,
    ShiftRuleConfig,
    TrendRuleConfig,
)
from trialground.monitor.correlation import Pair, eval_key_of, eval_pairs
from trialground.monitor.history import MetricHistory


class Rule(Protocol):
    name: str

    def check(self, step: int, history: MetricHistory) -> list[Alert]: ...

    def resume(self, alert: Alert) -> None:
        """Take back an alert this rule raised before the run was resumed (its cooldown restarts)."""
        ...


_MATCH_CACHE: dict[tuple[tuple[str, ...], str], bool] = {}


def _matching(patterns: tuple[str, ...], keys: set[str]) -> Iterator[str]:
    for key in sorted(keys):
        hit = _MATCH_CACHE.get((patterns, key))
        if hit is None:
            if len(_MATCH_CACHE) > 100_000:  # bounded: metric names are few, but be safe
                _MATCH_CACHE.clear()
            hit = _MATCH_CACHE[(patterns, key)] = any(fnmatch.fnmatchcase(key, p) for p in patterns)
        if hit:
            yield key


class _Cooldown:
    def __init__(self, steps: int) -> None:
        self.steps = steps
        self._last: dict[str, int] = {}

    def ready(self, key: str, step: int) -> bool:
        last = self._last.get(key)
        return last is None or step - last >= self.steps

    def fired(self, key: str, step: int) -> None:
        self._last[key] = step


def _window(steps: np.ndarray) -> tuple[int, int]:
    return int(steps[0]), int(steps[-1])


def _vals(v: np.ndarray) -> tuple[float, ...]:
    return tuple(round(float(x), 6) for x in v)


class ShiftRule:
    """Level shift against a trailing window (CUSUM; optionally confirmed by KS or PSI) or a fixed level."""

    def __init__(self, name: str, cfg: ShiftRuleConfig) -> None:
        self.name, self.cfg, self._cool = name, cfg, _Cooldown(cfg.cooldown)

    def resume(self, alert: Alert) -> None:
        self._cool.fired(alert.evidence.key, alert.step)

    def check(self, step: int, history: MetricHistory) -> list[Alert]:
        out: list[Alert] = []
        for key in _matching(self.cfg.keys, history.updated):
            if self._cool.ready(key, step) and (alert := self._check_key(step, key, history)):
                self._cool.fired(key, step)
                out.append(alert)
        return out

    def _check_key(self, step: int, key: str, history: MetricHistory) -> Alert | None:
        c = self.cfg
        steps, values = history.series(key, last=c.baseline + c.window)
        if c.level is not None and values.size >= c.level_window:
            recent = values[-c.level_window :]
            level_mean = float(recent.mean())
            above = level_mean >= c.level if c.direction != "down" else level_mean <= c.level
            if above:
                ev = Evidence(
                    key=key,
                    values=_vals(recent),
                    window=_window(steps[-c.level_window :]),
                    statistic="level_mean",
                    value=level_mean,
                    threshold=c.level,
                )
                return Alert.make(
                    self.name, c.action, step, f"{key} at {level_mean:.3g} (limit {c.level})", ev
                )
        if values.size < c.window + c.min_baseline or not self._supported(key, steps, history):
            return None
        ref, recent, rsteps = values[: -c.window], values[-c.window :], steps[-c.window :]
        res = detectors.cusum(recent, ref, k=c.cusum_k, sd_floor=c.sd_floor, direction=c.direction)
        if res.statistic <= c.cusum_h:
            return None
        post = recent[res.change_index :]
        if post.size < c.min_run:
            return None
        delta = float(post.mean()) - res.ref_mean
        if abs(delta) < max(c.min_delta, c.min_rel_delta * abs(res.ref_mean)):
            return None
        ks_stat, ks_p = detectors.ks(ref, post)
        psi = detectors.psi(ref, post)
        if c.confirm == "ks_or_psi" and not (ks_p < c.ks_alpha or psi > c.psi_threshold):
            return None
        ev = Evidence(
            key=key,
            values=_vals(recent),
            window=_window(rsteps),
            statistic="cusum",
            value=res.statistic,
            threshold=c.cusum_h,
            details={
                "direction": res.direction,
                "ref_mean": res.ref_mean,
                "ref_sd": res.ref_sd,
                "ref_n": float(ref.size),
                "post_mean": float(post.mean()),
                "delta": delta,
                "change_step": float(rsteps[res.change_index]),
                "ks_statistic": ks_stat,
                "ks_p": ks_p,
                "psi": psi,
            },
        )
        msg = f"{key} shifted {res.direction} by {delta:+.3g} (from {res.ref_mean:.3g} to {post.mean():.3g})"
        return Alert.make(self.name, c.action, step, msg, ev)

    def _supported(self, key: str, steps: np.ndarray, history: MetricHistory) -> bool:
        """Enough samples behind the recent values (`support_key`, `min_support`) to call a shift."""
        c = self.cfg
        if not c.support_key or c.min_support <= 0:
            return True
        support_key = c.support_key.replace("{name}", key.rsplit("/", 1)[-1])
        lo, hi = int(steps[-c.window]) - 1, int(steps[-1])
        support = history.between(support_key, lo, hi)
        return bool(support.size) and float(support.mean()) >= c.min_support


class TrendRule:
    """Monotone growth: Mann–Kendall p-value, positive Theil–Sen slope, and a growth worth reporting."""

    def __init__(self, name: str, cfg: TrendRuleConfig) -> None:
        self.name, self.cfg, self._cool = name, cfg, _Cooldown(cfg.cooldown)

    def resume(self, alert: Alert) -> None:
        self._cool.fired(alert.evidence.key, alert.step)

    def check(self, step: int, history: MetricHistory) -> list[Alert]:
        out: list[Alert] = []
        c = self.cfg
        for key in _matching(c.keys, history.updated):
            steps, values = history.series(key, last=c.window)
            if values.size < c.window or not self._cool.ready(key, step):
                continue
            if not detectors.plausible_upward_trend(values, c.alpha):
                continue  # cheap screen: scipy is only called when a trend is possible
            tr = detectors.trend(steps, values)
            span = float(steps[-1] - steps[0])
            growth = tr.slope * span
            start = float(np.median(values[: max(1, c.window // 4)]))
            needed = max(c.min_growth, c.min_rel_growth * abs(start))
            if not (tr.p_value < c.alpha and tr.slope > 0 and growth >= needed):
                continue
            ev = Evidence(
                key=key,
                values=_vals(values),
                window=_window(steps),
                statistic="mann_kendall_p",
                value=tr.p_value,
                threshold=c.alpha,
                details={
                    "kendall_tau": tr.tau,
                    "theil_sen_slope": tr.slope,
                    "slope_low": tr.slope_low,
                    "slope_high": tr.slope_high,
                    "growth": growth,
                    "growth_needed": needed,
                },
            )
            self._cool.fired(key, step)
            msg = f"{key} growing: {tr.slope:+.3g}/step over {c.window} steps (from ~{start:.3g})"
            out.append(Alert.make(self.name, c.action, step, msg, ev))
        return out


class DivergenceRule:
    """Training reward rising while evaluation is flat or falling over the last K evaluations."""

    def __init__(self, name: str, cfg: DivergenceRuleConfig) -> None:
        self.name, self.cfg, self._cool = name, cfg, _Cooldown(cfg.cooldown)

    def resume(self, alert: Alert) -> None:
        self._cool.fired(alert.evidence.key.split(",")[-1], alert.step)

    def check(self, step: int, history: MetricHistory) -> list[Alert]:
        c = self.cfg
        eval_key = eval_key_of(c, history)
        if eval_key not in history.updated or not self._cool.ready(eval_key, step):
            return []
        pairs = eval_pairs(history, c.train_key, eval_key, c.k_evals)
        if len(pairs) < c.k_evals:
            return []
        found = self._trend(history, eval_key, pairs) or self._since_start(history, eval_key)
        if found is None:
            return []
        summary, details = found
        xs = [p[0] for p in pairs]
        tr_vals = [p[1] for p in pairs]
        ev_vals = np.array([p[2] for p in pairs])
        rho = detectors.spearman(tr_vals, ev_vals)
        hack_signals, cause = _suspected_cause(history)
        ev = Evidence(
            key=f"{c.train_key},{eval_key}",
            values=_vals(ev_vals),
            window=(int(xs[0]), int(xs[-1])),
            statistic="spearman",
            value=rho,
            threshold=c.max_spearman,
            details={
                "train_values": ",".join(f"{v:.4g}" for v in tr_vals),
                **details,
                "k_evals": float(c.k_evals),
                **hack_signals,
            },
        )
        self._cool.fired(eval_key, step)
        msg = f"{summary} (Spearman {rho:+.2f}); suspected cause: {cause}"
        return [Alert.make(self.name, c.action, step, msg, ev)]

    def _trend(
        self, history: MetricHistory, eval_key: str, pairs: list[Pair]
    ) -> tuple[str, dict[str, float]] | None:
        """Train reward trending up over the last K evaluations while evaluation is flat or falling."""
        c = self.cfg
        xs = np.array([p[0] for p in pairs], dtype=float)
        tr_vals = np.array([p[1] for p in pairs])
        ev_vals = np.array([p[2] for p in pairs])
        span = float(xs[-1] - xs[0]) or 1.0
        t_tr, e_tr = detectors.trend(xs, tr_vals), detectors.trend(xs, ev_vals)
        rho = detectors.spearman(tr_vals, ev_vals)
        train_rise, eval_change = t_tr.slope * span, e_tr.slope * span
        if not (
            t_tr.tau >= c.min_train_tau
            and train_rise >= c.min_train_rise
            and eval_change <= c.eval_tolerance
            and rho <= c.max_spearman
        ):
            return None
        gap_growth = detectors.trend(xs, tr_vals - ev_vals).slope * span
        if gap_growth < c.min_gap_growth:
            return None
        sigma = _eval_sigma(history, eval_key, float(ev_vals.mean()), c.k_evals)
        eval_se = sigma * span / math.sqrt(float(((xs - xs.mean()) ** 2).sum())) if sigma is not None else 0.0
        if gap_growth < c.min_gap_z * eval_se:
            return None
        per_step = history.between(c.train_key, int(xs[0]), int(xs[-1]))
        half = per_step.size // 2
        train_t = detectors.welch_t(per_step[:half], per_step[half:])
        if train_t < c.min_train_t:
            return None
        summary = (
            f"{c.train_key} rose {train_rise:+.3g} while the evaluation changed {eval_change:+.3g} "
            f"over the last {c.k_evals} evaluations"
        )
        return summary, {
            "path": 0.0,  # 0: trend over the window, 1: level since the start
            "train_tau": t_tr.tau,
            "train_rise": train_rise,
            "eval_tau": e_tr.tau,
            "eval_change": eval_change,
            "eval_theil_sen_slope": e_tr.slope,
            "gap_growth": gap_growth,
            "eval_change_se": eval_se,
            "train_welch_t": min(train_t, 1e6),  # inf: two noiseless halves
        }

    def _since_start(self, history: MetricHistory, eval_key: str) -> tuple[str, dict[str, float]] | None:
        """A reward that jumped before the window began: the per-step training reward of the last K-1
        evaluation intervals against the first interval's (the policy as it started), and the mean of
        those K-1 evaluations against the first evaluation."""
        c = self.cfg
        esteps, evals = history.series(eval_key)
        if esteps.size < c.k_evals + 1 or c.min_level_rise <= 0:
            return None
        base = history.between(c.train_key, int(esteps[0]), int(esteps[1]))
        recent = history.between(c.train_key, int(esteps[-c.k_evals]), int(esteps[-1]))
        if base.size == 0 or recent.size == 0:
            return None
        train_rise = float(recent.mean() - base.mean())
        eval_change = float(evals[-(c.k_evals - 1) :].mean() - evals[0])
        train_t = detectors.welch_t(base, recent)
        if train_rise < c.min_level_rise or eval_change > c.eval_tolerance or train_t < c.min_level_t:
            return None
        recent_sigma = _eval_sigma(history, eval_key, float(evals[-(c.k_evals - 1) :].mean()), c.k_evals)
        first_sigma = _eval_sigma(history, eval_key, float(evals[0]), c.k_evals)
        eval_se = 0.0
        if recent_sigma is not None and first_sigma is not None:
            eval_se = math.sqrt(recent_sigma**2 / (c.k_evals - 1) + first_sigma**2)
        if train_rise - eval_change < c.min_gap_z * eval_se:
            return None
        summary = (
            f"{c.train_key} is {train_rise:+.3g} above its first {base.size} steps while the evaluation "
            f"changed {eval_change:+.3g} since step {int(esteps[0])}"
        )
        return summary, {
            "path": 1.0,
            "train_rise": train_rise,
            "eval_change": eval_change,
            "train_welch_t": min(train_t, 1e6),
            "eval_change_se": eval_se,
            "baseline_steps": float(base.size),
        }


def _eval_sigma(history: MetricHistory, eval_key: str, rate: float, k: int) -> float | None:
    """The binomial standard error of one evaluation point at pass rate `rate`, over the fewest tasks
    `<prefix>/n_tasks` logged at the last `k` evaluations (add-one smoothed, so a rate of 0 still has an
    error); None when the run logs no task count for the evaluation."""
    _, counts = history.series(eval_key.split("/", 1)[0] + "/n_tasks", last=k)
    if not counts.size or counts.min() < 1:
        return None
    n = float(counts.min())
    p = (rate * n + 1.0) / (n + 2.0)
    return math.sqrt(p * (1.0 - p) / n)


def _suspected_cause(history: MetricHistory) -> tuple[dict[str, float], str]:
    """The latest `hack/*` rates (canary cheat rate, detector flag rate, ...) and the cause they point to."""
    signals: dict[str, float] = {}
    for key in history:
        if key.startswith("hack/") and key.endswith("_rate"):
            _, values = history.series(key, last=1)
            signals[key] = float(values[-1])
    hot = sorted(((v, k) for k, v in signals.items() if v > 0), reverse=True)
    if hot:
        listed = ", ".join(f"{k}={v:.2f}" for v, k in hot[:3])
        return signals, f"reward hacking: the training reward is being gamed ({listed})"
    return signals, "the reward may be gamed or the evaluation may have drifted (no hack/* signal is raised)"


class LengthRule:
    """Mean response length jumping while accuracy stays flat."""

    def __init__(self, name: str, cfg: LengthRuleConfig) -> None:
        self.name, self.cfg, self._cool = name, cfg, _Cooldown(cfg.cooldown)

    def resume(self, alert: Alert) -> None:
        self._cool.fired(self.cfg.length_key, alert.step)

    def check(self, step: int, history: MetricHistory) -> list[Alert]:
        c = self.cfg
        if c.length_key not in history.updated or not self._cool.ready(c.length_key, step):
            return []
        steps, lengths = history.series(c.length_key, last=c.baseline + c.window)
        if lengths.size < c.baseline + c.window:
            return []
        ref, recent = lengths[: -c.window], lengths[-c.window :]
        mu, sd = float(ref.mean()), max(float(ref.std(ddof=1)), 1e-9)
        z = (float(recent.mean()) - mu) / (sd / math.sqrt(c.window))
        rel = (float(recent.mean()) - mu) / max(abs(mu), 1e-9)
        split = int(steps[-c.window - 1])
        acc_ref = history.between(c.accuracy_key, int(steps[0]) - 1, split)
        acc_recent = history.between(c.accuracy_key, split, int(steps[-1]))
        if not (z >= c.z_threshold and rel >= c.min_rel_jump and acc_ref.size and acc_recent.size):
            return []
        acc_delta = float(acc_recent.mean() - acc_ref.mean())
        if acc_delta > c.accuracy_tolerance:
            return []
        ev = Evidence(
            key=f"{c.length_key},{c.accuracy_key}",
            values=_vals(recent),
            window=_window(steps[-c.window :]),
            statistic="length_z",
            value=z,
            threshold=c.z_threshold,
            details={"ref_mean": mu, "ref_sd": sd, "rel_jump": rel, "accuracy_delta": acc_delta},
        )
        self._cool.fired(c.length_key, step)
        msg = f"response length up {rel:+.0%} (z={z:.1f}) while accuracy changed {acc_delta:+.3f}"
        return [Alert.make(self.name, c.action, step, msg, ev)]


class CollapseRule:
    """A metric falling below a fraction of its early median."""

    def __init__(self, name: str, cfg: CollapseRuleConfig) -> None:
        self.name, self.cfg, self._cool = name, cfg, _Cooldown(cfg.cooldown)

    def resume(self, alert: Alert) -> None:
        self._cool.fired(self.cfg.key, alert.step)

    def check(self, step: int, history: MetricHistory) -> list[Alert]:
        c = self.cfg
        if c.key not in history.updated or not self._cool.ready(c.key, step):
            return []
        steps, values = history.series(c.key)
        if values.size < c.reference_steps + c.window:
            return []
        ref = float(np.median(values[: c.reference_steps]))
        recent = values[-c.window :]
        frac = float(recent.mean()) / ref if ref > 0 else 1.0
        if frac >= c.min_fraction:
            return []
        ev = Evidence(
            key=c.key,
            values=_vals(recent),
            window=_window(steps[-c.window :]),
            statistic="fraction_of_reference",
            value=frac,
            threshold=c.min_fraction,
            details={"reference_median": ref, "reference_steps": float(c.reference_steps)},
        )
        self._cool.fired(c.key, step)
        return [Alert.make(self.name, c.action, step, f"{c.key} fell to {frac:.0%} of its early median", ev)]


def build_rules(cfg: RulesConfig) -> list[Rule]:
    """The enabled rules of `cfg`, one per section, named after the section."""
    rules: list[Rule] = []
    for name in type(cfg).model_fields:
        section = getattr(cfg, name)
        if not section.enabled:
            continue
        if isinstance(section, ShiftRuleConfig):
            rules.append(ShiftRule(name, section))
        elif isinstance(section, TrendRuleConfig):
            rules.append(TrendRule(name, section))
        elif isinstance(section, DivergenceRuleConfig):
            rules.append(DivergenceRule(name, section))
        elif isinstance(section, LengthRuleConfig):
            rules.append(LengthRule(name, section))
        elif isinstance(section, CollapseRuleConfig):
            rules.append(CollapseRule(name, section))
    return rules
