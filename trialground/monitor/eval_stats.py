"""Evaluation statistics: unbiased pass@k, per-domain breakdown, and the train/eval overlap check.

pass@k is the unbiased estimator of Chen et al. (2021): with n samples of which c are correct,
pass@k = 1 - C(n-c, k) / C(n, k), computed as a stable product. Tasks with n < k are left out of pass@k.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


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


class _HasPrompt(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def prompt(self) -> str: ...


@dataclass(frozen=True)
class OverlapReport:
    """Eval tasks that also appear in training: by id, or by n-gram containment of their prompts."""

    same_id: tuple[str, ...] = ()
    near_duplicates: tuple[tuple[str, str, float], ...] = field(default=())  # (eval id, train id, score)
    n: int = 8
    threshold: float = 0.8

    @property
    def clean(self) -> bool:
        return not self.same_id and not self.near_duplicates


_WORD = re.compile(r"\w+")


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def check_overlap(
    eval_tasks: Iterable[_HasPrompt], train_tasks: Iterable[_HasPrompt], *, n: int = 8, threshold: float = 0.8
) -> OverlapReport:
    """Find eval tasks leaking into training.

    `same_id`: ids in both sets (ids are content hashes, so equal id = identical task). `near_duplicates`:
    pairs whose eval prompt has at least `threshold` of its word n-grams in one training prompt
    (containment, so a training prompt that embeds the eval prompt counts). Templated task families share
    boilerplate: raise `n` or `threshold` when their prompts differ only in a few words.
    """
    train = list(train_tasks)
    train_ids = {t.id for t in train}
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, t in enumerate(train):
        for g in _ngrams(t.prompt, n):
            index[g].append(i)
    same: list[str] = []
    near: list[tuple[str, str, float]] = []
    for e in eval_tasks:
        if e.id in train_ids:
            same.append(e.id)
            continue
        grams = _ngrams(e.prompt, n)
        if not grams:
            continue
        hits: dict[int, int] = defaultdict(int)
        for g in grams:
            for i in index.get(g, ()):
                hits[i] += 1
        if hits:
            best = max(hits, key=lambda i: hits[i])
            score = hits[best] / len(grams)
            if score >= threshold:
                near.append((e.id, train[best].id, score))
    return OverlapReport(tuple(same), tuple(near), n, threshold)
