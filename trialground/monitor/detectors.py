"""Statistical tests behind the alert rules. Pure functions on arrays; scipy does the heavy lifting.

- `cusum`: Page's one- or two-sided CUSUM on values standardised against a reference window, with the
  change point it implies (the last time the statistic was zero).
- `ks`: two-sample Kolmogorov–Smirnov (`scipy.stats.ks_2samp`).
- `psi`: population stability index over reference-quantile bins (< 0.1 stable, 0.1–0.25 moderate,
  > 0.25 major shift — the conventional reading).
- `trend`: Mann–Kendall (Kendall's tau of value against time, `scipy.stats.kendalltau`) with the
  Theil–Sen slope (`scipy.stats.theilslopes`).
- `spearman`: rank correlation (`scipy.stats.spearmanr`).
- `welch_t`: Welch's two-sample t statistic (unequal variances; written out so that a noiseless side
  gives an infinite t instead of scipy's precision warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats


@dataclass(frozen=True)
class CusumResult:
    statistic: float  # the largest CUSUM value reached (upper or lower, whichever is larger)
    direction: Literal["up", "down"]
    change_index: int  # index into the tested values where the shift is estimated to start
    ref_mean: float
    ref_sd: float


def cusum(
    values: ArrayLike,
    reference: ArrayLike,
    *,
    k: float = 0.5,
    sd_floor: float = 1e-9,
    direction: Literal["up", "down", "both"] = "both",
) -> CusumResult:
    """Page CUSUM of `values` standardised by the mean and SD of `reference`.

    S+_t = max(0, S+_{t-1} + z_t - k), S-_t = max(0, S-_{t-1} - z_t - k); the statistic is the largest value
    reached by the side(s) asked for, in reference SDs.
    """
    x = np.asarray(values, dtype=float)
    ref = np.asarray(reference, dtype=float)
    mu = float(ref.mean())
    sd = max(float(ref.std(ddof=1)) if ref.size > 1 else 0.0, sd_floor)
    z = (x - mu) / sd
    best = CusumResult(0.0, "up", len(x), mu, sd)
    for sign, name in ((1.0, "up"), (-1.0, "down")):
        if direction not in (name, "both"):
            continue
        s, start, top, top_start = 0.0, 0, 0.0, len(x)
        for i, zi in enumerate(sign * z):
            if s == 0.0:
                start = i
            s = max(0.0, s + zi - k)
            if s > top:
                top, top_start = s, start
        if top > best.statistic:
            best = CusumResult(top, name, top_start, mu, sd)  # type: ignore[arg-type]
    return best


def ks(reference: ArrayLike, values: ArrayLike) -> tuple[float, float]:
    """(KS statistic, p-value) of two samples."""
    res = stats.ks_2samp(np.asarray(reference, dtype=float), np.asarray(values, dtype=float))
    return float(res.statistic), float(res.pvalue)


def psi(reference: ArrayLike, values: ArrayLike, *, bins: int = 10, eps: float = 1e-4) -> float:
    """Population stability index of `values` against `reference`.

    Bin edges are the reference's quantiles (deduplicated, so a constant reference gives one inner edge);
    empty bins get `eps` mass so the log stays finite.
    """
    ref = np.asarray(reference, dtype=float)
    cur = np.asarray(values, dtype=float)
    edges = np.unique(np.quantile(ref, np.linspace(0, 1, bins + 1))[1:-1])
    if edges.size == 0:
        edges = np.array([ref[0]])
    # Bins are (-inf, e0], (e0, e1], ..., (e_last, inf): a constant reference still separates a shift.
    ref_counts = np.bincount(np.searchsorted(edges, ref, side="left"), minlength=edges.size + 1)
    cur_counts = np.bincount(np.searchsorted(edges, cur, side="left"), minlength=edges.size + 1)
    p = np.maximum(ref_counts / ref.size, eps)
    q = np.maximum(cur_counts / cur.size, eps)
    return float(np.sum((q - p) * np.log(q / p)))


@dataclass(frozen=True)
class TrendResult:
    slope: float  # Theil–Sen slope per unit of x
    slope_low: float  # its 95% confidence bounds
    slope_high: float
    tau: float  # Kendall's tau of y against x (Mann–Kendall statistic)
    p_value: float  # two-sided p-value of tau


def trend(x: ArrayLike, y: ArrayLike) -> TrendResult:
    """Mann–Kendall test and Theil–Sen slope of `y` against `x` (NaN p-value when y is constant)."""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    ts = stats.theilslopes(ys, xs, alpha=0.95)
    if np.ptp(ys) == 0.0:
        tau, p = 0.0, 1.0
    else:
        kt = stats.kendalltau(xs, ys)
        tau, p = float(kt.statistic), float(kt.pvalue)
    return TrendResult(float(ts.slope), float(ts.low_slope), float(ts.high_slope), tau, p)


def plausible_upward_trend(y: ArrayLike, alpha: float) -> bool:
    """A cheap, conservative screen before `trend`: False only when Mann–Kendall cannot reach `alpha`.

    Uses the S statistic with the no-ties variance (ties only shrink the variance, i.e. raise |z|, so the
    screen lets through ten times the alpha to stay on the safe side).
    """
    ys = np.asarray(y, dtype=float)
    n = ys.size
    s = float(np.sign(ys[None, :] - ys[:, None])[np.triu_indices(n, 1)].sum())
    if s <= 0:
        return False
    var = n * (n - 1) * (2 * n + 5) / 18.0
    z = (s - 1) / math.sqrt(var)
    p = math.erfc(z / math.sqrt(2))  # two-sided
    return p < min(1.0, 10 * alpha)


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman rank correlation; 0.0 when either side is constant (no evidence either way)."""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if np.ptp(xs) == 0.0 or np.ptp(ys) == 0.0:
        return 0.0
    rho = float(stats.spearmanr(xs, ys).statistic)
    return 0.0 if math.isnan(rho) else rho


def welch_t(before: ArrayLike, after: ArrayLike) -> float:
    """Welch's t of mean(after) - mean(before); 0.0 with fewer than 2 values a side. Two constant samples
    give +inf/-inf when their means differ (no noise at all) and 0.0 when they are equal."""
    a = np.asarray(before, dtype=float)
    b = np.asarray(after, dtype=float)
    if a.size < 2 or b.size < 2:
        return 0.0
    diff = float(b.mean() - a.mean())
    se = math.sqrt(float(a.var(ddof=1)) / a.size + float(b.var(ddof=1)) / b.size)
    if se < 1e-12:
        return math.copysign(math.inf, diff) if abs(diff) > 1e-12 else 0.0
    return diff / se
