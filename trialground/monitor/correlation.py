"""The reward–evaluation pairs behind the divergence rule, and the correlation logged at every evaluation.

At each evaluation step the training side is the mean training reward (`train_key`) over the steps since
the previous evaluation; the evaluation side is the evaluation metric at that step. The evaluation metric
is `probe_key` (the cheap frequent probe, `loop.probe_interval`) when the run logs it, else `eval_key`.

`correlation_metrics` adds, at every step that has a probe or an evaluation (a full evaluation at a step
without a probe logs the pairs of the probe series as they stand):

- `monitor/reward_eval_spearman`: Spearman's rank correlation of the last `k_evals` pairs (once there are
  at least 3; with 2 or fewer it is not logged, since no rank correlation exists yet);
- `monitor/reward_eval_points`: how many pairs it used (logged from the first evaluation on);
- `monitor/reward_eval_gap`: the latest pair's training reward minus evaluation value.
"""

from __future__ import annotations

import itertools

import numpy as np

from trialground.monitor import detectors
from trialground.monitor.config import DivergenceRuleConfig
from trialground.monitor.history import MetricHistory

Pair = tuple[int, float, float]  # (evaluation step, mean training reward since the previous one, eval)


def eval_key_of(cfg: DivergenceRuleConfig, history: MetricHistory) -> str:
    """The evaluation metric the rule compares: the probe's when the run has probes, else the full eval's."""
    return cfg.probe_key if cfg.probe_key and cfg.probe_key in history else cfg.eval_key


def eval_pairs(history: MetricHistory, train_key: str, eval_key: str, k: int) -> list[Pair]:
    """The last `k` evaluations that have training data before them, oldest first."""
    esteps, evals = history.series(eval_key, last=k + 1)
    if not esteps.size:
        return []
    gap = int(np.diff(esteps).mean()) if esteps.size > 1 else 1
    bounds = [int(esteps[0]) - gap, *map(int, esteps)]
    out: list[Pair] = []
    for (lo, hi), e in zip(itertools.pairwise(bounds), evals, strict=True):
        train = history.between(train_key, lo, hi)
        if train.size:
            out.append((hi, float(train.mean()), float(e)))
    return out[-k:]


def correlation_metrics(history: MetricHistory, cfg: DivergenceRuleConfig) -> dict[str, float]:
    """The `monitor/reward_eval_*` metrics for the latest step (empty when it has no probe or evaluation)."""
    key = eval_key_of(cfg, history)
    if key not in history.updated and cfg.eval_key not in history.updated:
        return {}
    pairs = eval_pairs(history, cfg.train_key, key, cfg.k_evals)
    out = {"monitor/reward_eval_points": float(len(pairs))}
    if pairs:
        out["monitor/reward_eval_gap"] = pairs[-1][1] - pairs[-1][2]
    if len(pairs) >= 3:
        out["monitor/reward_eval_spearman"] = detectors.spearman([p[1] for p in pairs], [p[2] for p in pairs])
    return out
