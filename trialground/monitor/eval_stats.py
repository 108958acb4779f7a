"""Evaluation statistics: unbiased pass@k and the per-domain breakdown (train/eval contamination is
`trialground.tasks.dedup.eval_contamination`).

pass@k is the unbiased estimator of Chen et al. (2021): with n samples of which c are correct,
pass@k = 1 - C(n-c, k) / C(n, k), computed as a stable product. Tasks with n < k are left out of pass@k.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EvalOutcome:
    """One evaluated task: n samples, c of them correct."""

    task_id: str
    domain: str
    n: int
    correct: int

    def __post_init__(self) -> None:
        if not 0 <= self.correct <= self.n:
            raise ValueError(f"eval outcome {self.task_id}: correct={self.correct} not in [0, n={self.n}]")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with `n` samples, `c` correct (requires 1 <= k <= n)."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    prob_all_fail = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_fail *= 1.0 - k / i
    return 1.0 - prob_all_fail


def outcomes_from_samples(samples: Iterable[tuple[str, str, bool]]) -> list[EvalOutcome]:
    """Group per-sample records (task_id, domain, passed) into one `EvalOutcome` per task."""
    n: dict[tuple[str, str], int] = defaultdict(int)
    c: dict[tuple[str, str], int] = defaultdict(int)
    for task_id, domain, passed in samples:
        n[(task_id, domain)] += 1
        c[(task_id, domain)] += int(bool(passed))
    return [EvalOutcome(t, d, n[(t, d)], c[(t, d)]) for (t, d) in n]


def summarise(
    outcomes: Sequence[EvalOutcome], ks: Sequence[int] = (1,), prefix: str = "eval"
) -> dict[str, float]:
    """Metrics `eval/pass@k`, `eval/pass@k/<domain>`, `eval/n_tasks`, `eval/n_tasks/<domain>`.

    A domain's pass@k is the mean over its tasks with at least k samples.
    """
    out: dict[str, float] = {f"{prefix}/n_tasks": float(len(outcomes))}
    domains = sorted({o.domain for o in outcomes})
    for d in domains:
        out[f"{prefix}/n_tasks/{d}"] = float(sum(o.domain == d for o in outcomes))
    for k in ks:
        scored = [(o.domain, pass_at_k(o.n, o.correct, k)) for o in outcomes if o.n >= k]
        if not scored:
            continue
        out[f"{prefix}/pass@{k}"] = sum(v for _, v in scored) / len(scored)
        for d in domains:
            vals = [v for dom, v in scored if dom == d]
            if vals:
                out[f"{prefix}/pass@{k}/{d}"] = sum(vals) / len(vals)
    return out
