"""The task pool: which training tasks each step sees.

Sampling probability of a training task::

    p(task) ∝ weight(task) / |group(task)| × domain_weight(domain) × band_factor(pass rate)

- groups: each source (or, without one, each domain) gets total mass ∝ its weight whatever its size;
- bands: a task's pass rate is an EMA of its recorded outcomes; after `band_min_attempts` attempts a task
  at or above `easy_threshold` (always solved) or at or below `hard_threshold` (never solved) is weighted
  by `easy_weight`/`hard_weight`, others by `learning_weight`, unbanded ones by `new_weight`;
- general tasks (sources marked `general`) fill on average `general_ratio` of each batch;
- the regression queue: `add_regressions(ids)` puts tasks (training tasks, or evaluation tasks given with
  `tasks=`) back with `regression_weight` × their normal weight (no band factor) until they have passed
  `regression_passes` times; `record_group` queues a task by itself when the policy forgot it (its pass
  rate was at least `requeue_pass_rate` and a whole group of attempts then failed).

Within a batch tasks are drawn without replacement while enough candidates have weight; a larger batch
draws the rest with replacement. All randomness comes from one numpy Generator seeded by `config.seed`;
`state_dict()` holds it with every statistic, so a resumed run samples exactly the same next tasks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trialground.errors import TaskError
from trialground.tasks.config import TaskPoolConfig
from trialground.tasks.dedup import Decontamination, decontaminate
from trialground.tasks.model import Task


@dataclass(frozen=True)
class Attempt:
    """One graded attempt of a task: whether it passed, and the (name, evidence) of each hack flag."""

    passed: bool
    hacks: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Observed:
    """What `TaskPool.observe` queued: tasks with hack-flagged attempts (and those flags' names and
    evidence), and tasks the policy forgot (a whole group failed after a pass rate of at least
    `requeue_pass_rate`)."""

    flagged: dict[str, list[tuple[str, str]]]
    forgotten: list[str]


STATE_VERSION = 1


def default_group(task: Task) -> str:
    source = task.metadata.get("source") or task.metadata.get("family")
    return str(source) if source else task.domain


class TaskPool:
    def __init__(
        self,
        tasks: Sequence[Task],
        config: TaskPoolConfig | None = None,
        *,
        weights: Mapping[str, float] | None = None,
        groups: Mapping[str, str] | None = None,
        general: Collection[str] = (),
        eval_tasks: Sequence[Task] = (),
    ) -> None:
        """`tasks`: split "train" tasks are the training set (duplicate ids keep the first); split "eval"
        tasks join `eval_tasks` and are never sampled unless queued as regressions. `weights`: task id ->
        weight (its source's weight, default 1). `groups`: task id -> group (default: metadata source or
        family, else domain). `general`: ids of general tasks."""
        self.config = config or TaskPoolConfig()
        unique: dict[str, Task] = {}
        held_out: dict[str, Task] = {t.id: t for t in eval_tasks}
        for t in tasks:
            if t.split == "eval":
                held_out.setdefault(t.id, t)
            else:
                unique.setdefault(t.id, t)
        if not unique:
            raise TaskError("the task pool is empty: no training tasks", kind="empty")
        self.eval_tasks: list[Task] = [t for tid, t in held_out.items() if tid not in unique]
        self.tasks: list[Task] = list(unique.values())
        self.decontamination: Decontamination | None = None  # set by load_task_sets
        self._index = {t.id: i for i, t in enumerate(self.tasks)}
        weights = weights or {}
        groups = groups or {}
        group_of = [groups.get(t.id) or default_group(t) for t in self.tasks]
        sizes: dict[str, int] = {}
        for g in group_of:
            sizes[g] = sizes.get(g, 0) + 1
        base = []
        for t, g in zip(self.tasks, group_of, strict=True):
            w = float(weights.get(t.id, 1.0))
            if w < 0:
                raise TaskError(f"task {t.id}: negative weight {w}", kind="bad_weight")
            base.append(w / sizes[g] * self.config.domain_weights.get(t.domain, 1.0))
        self._base = np.asarray(base, dtype=np.float64)  # [N]
        if not self._base.sum() > 0:
            raise TaskError("every training task has weight 0", kind="bad_weight")
        self._group_of = group_of
        general_ids = set(general)
        self._general = np.asarray([t.id in general_ids for t in self.tasks], dtype=bool)  # [N]
        self._attempts: dict[str, int] = {}
        self._passes: dict[str, int] = {}
        self._ema: dict[str, float] = {}
        self._regressions: dict[str, int] = {}  # task id -> passes still needed
        self._extra: dict[str, Task] = {}  # regression tasks that are not training tasks (e.g. eval)
        # Band factor of each training task, kept current by record(): sampling stays O(N) in numpy.
        self._factor = np.full(len(self.tasks), self.config.new_weight)  # [N]
        self._rng = np.random.default_rng(self.config.seed)
        self.sampled = 0

    # -- statistics -------------------------------------------------------------------------------
    def pass_rate(self, task_id: str) -> float | None:
        return self._ema.get(task_id)

    def band(self, task_id: str) -> str:
        """new | easy | hard | learning."""
        c = self.config
        if self._attempts.get(task_id, 0) < c.band_min_attempts:
            return "new"
        rate = self._ema[task_id]
        if rate >= c.easy_threshold:
            return "easy"
        if rate <= c.hard_threshold:
            return "hard"
        return "learning"

    def _band_factor(self, task_id: str) -> float:
        c = self.config
        return {
            "new": c.new_weight,
            "easy": c.easy_weight,
            "hard": c.hard_weight,
            "learning": c.learning_weight,
        }[self.band(task_id)]

    def record(self, task_id: str, passed: bool) -> None:
        """One graded attempt of a task (training or queued regression)."""
        if task_id not in self._index and task_id not in self._extra:
            raise TaskError(f"record: unknown task {task_id!r}", kind="unknown_task")
        x = 1.0 if passed else 0.0
        prev = self._ema.get(task_id)
        self._ema[task_id] = (
            x if prev is None else (1 - self.config.ema_alpha) * prev + self.config.ema_alpha * x
        )
        self._attempts[task_id] = self._attempts.get(task_id, 0) + 1
        self._passes[task_id] = self._passes.get(task_id, 0) + int(passed)
        if task_id in self._index:
            self._factor[self._index[task_id]] = self._band_factor(task_id)
        if passed and task_id in self._regressions:
            self._regressions[task_id] -= 1
            if self._regressions[task_id] <= 0:
                # no longer sampled; it stays known, so the rest of its group (and a later re-queue,
                # e.g. when it is forgotten) can still be recorded
                del self._regressions[task_id]

    def observe(self, tasks: Sequence[Task], groups: Sequence[Sequence[Attempt]]) -> Observed:
        """A step's graded attempts (`groups[i]` are attempts of `tasks[i]`; infrastructure failures are
        not attempts): each group is recorded (`record_group`, which re-queues a forgotten task), and tasks
        with an attempt flagged as a `hack` are queued as regressions."""
        flagged: dict[str, list[tuple[str, str]]] = {}
        forgotten: list[str] = []
        for task, group in zip(tasks, groups, strict=True):
            if group and self.record_group(task.id, [a.passed for a in group]):
                forgotten.append(task.id)
            hacks = [h for a in group for h in a.hacks]
            if hacks:
                flagged.setdefault(task.id, []).extend(hacks)
        if flagged:
            self.add_regressions(sorted(flagged))
        return Observed(flagged=flagged, forgotten=forgotten)

    def record_group(self, task_id: str, passed: Sequence[bool]) -> bool:
        """One group of graded attempts of a task; True when it queued the task as a regression: its pass
        rate before the group was at least `requeue_pass_rate` and no attempt of the group passed."""
        before = self._ema.get(task_id)
        for p in passed:
            self.record(task_id, p)
        threshold = self.config.requeue_pass_rate
        if threshold is None or before is None or before < threshold or not passed or any(passed):
            return False
        if task_id in self._regressions:
            return False
        self.add_regressions([task_id])
        return True

    # -- regressions ------------------------------------------------------------------------------
    def add_regressions(self, task_ids: Iterable[str], *, tasks: Iterable[Task] = ()) -> None:
        """Queue tasks to come back (e.g. failed evaluation tasks). Ids outside the training set must be
        given with their `Task` in `tasks`; an id found nowhere raises `TaskError`."""
        known = {t.id: t for t in tasks}
        for tid in task_ids:
            if tid not in self._index:
                if tid in known:
                    self._extra[tid] = known[tid]
                elif tid not in self._extra:
                    raise TaskError(
                        f"add_regressions: unknown task {tid!r} (pass it in tasks=)", kind="unknown_task"
                    )
            self._regressions[tid] = self.config.regression_passes

    @property
    def regressions(self) -> list[str]:
        return list(self._regressions)

    # -- sampling ---------------------------------------------------------------------------------
    def _candidates(self) -> tuple[list[Task], np.ndarray, np.ndarray]:
        """All sampleable tasks, their weights [M] and general mask [M] (training tasks, then extras)."""
        weights = self._base * self._factor
        mean_base = float(self._base.mean())
        for tid in self._regressions:
            if tid in self._index:
                i = self._index[tid]
                weights[i] = self._base[i] * self.config.regression_weight
        extras = [self._extra[tid] for tid in self._regressions if tid in self._extra]
        extra_w = np.full(len(extras), mean_base * self.config.regression_weight)
        return (
            self.tasks + extras,
            np.concatenate([weights, extra_w]),
            np.concatenate([self._general, np.zeros(len(extras), dtype=bool)]),
        )

    def _draw(self, weights: np.ndarray, k: int) -> list[int]:
        if k <= 0:
            return []
        total = weights.sum()
        if not total > 0:
            return []
        p = weights / total
        positive = int((weights > 0).sum())
        first = min(k, positive)
        picks = list(self._rng.choice(len(weights), size=first, replace=False, p=p))
        if k > first:
            picks += list(self._rng.choice(len(weights), size=k - first, replace=True, p=p))
        return [int(i) for i in picks]

    def sample(self, n: int) -> list[Task]:
        """`n` tasks for the next batch (deterministic given the seed and the recorded history)."""
        if n < 1:
            raise TaskError(f"sample: n must be >= 1, got {n}", kind="bad_request")
        tasks, weights, general = self._candidates()
        if not weights.sum() > 0:
            raise TaskError(
                "no task has a positive sampling weight (are all tasks in bands weighted 0?)", kind="empty"
            )
        g_w, s_w = np.where(general, weights, 0.0), np.where(general, 0.0, weights)
        ratio = self.config.general_ratio
        if g_w.sum() > 0 and s_w.sum() > 0 and ratio > 0:
            # Integer part plus a Bernoulli draw for the fraction: the expected share is exactly `ratio`.
            k = int(np.floor(n * ratio + self._rng.random()))
            picks = self._draw(g_w, k) + self._draw(s_w, n - k)
        else:
            picks = self._draw(s_w if s_w.sum() > 0 else g_w, n)
        self.sampled += n
        return [tasks[i] for i in picks]

    def probabilities(self) -> dict[str, float]:
        """The current sampling probability of every candidate (general ratio aside)."""
        tasks, weights, _ = self._candidates()
        p = weights / weights.sum()
        return {t.id: float(x) for t, x in zip(tasks, p, strict=True)}

    def stats(self) -> dict[str, float]:
        """Namespaced metrics for the monitor."""
        bands = {"new": 0, "easy": 0, "hard": 0, "learning": 0}
        for t in self.tasks:
            bands[self.band(t.id)] += 1
        rates = [self._ema[t.id] for t in self.tasks if t.id in self._ema]
        out = {f"tasks/band_{k}": float(v) for k, v in bands.items()}
        out.update(
            {
                "tasks/train": float(len(self.tasks)),
                "tasks/regressions": float(len(self._regressions)),
                "tasks/mean_pass_rate": float(np.mean(rates)) if rates else 0.0,
                "tasks/sampled": float(self.sampled),
            }
        )
        return out

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: statistics, regression queue (with any non-training task), RNG."""
        return {
            "version": STATE_VERSION,
            "rng": self._rng.bit_generator.state,
            "sampled": self.sampled,
            "stats": {
                tid: [self._attempts[tid], self._passes.get(tid, 0), self._ema[tid]] for tid in self._attempts
            },
            "regressions": dict(self._regressions),
            "extra_tasks": [t.model_dump(mode="json") for t in self._extra.values()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict()`. Statistics of tasks this pool does not hold raise `TaskError`."""
        if state.get("version") != STATE_VERSION:
            raise TaskError(
                f"task pool state: unsupported version {state.get('version')!r}", kind="bad_state"
            )
        extra = {t.id: t for t in (Task.model_validate(d) for d in state.get("extra_tasks", []))}
        unknown = [
            tid
            for tid in [*state["stats"], *state["regressions"]]
            if tid not in self._index and tid not in extra
        ]
        if unknown:
            raise TaskError(
                f"task pool state: {len(unknown)} task(s) not in this pool, e.g. {unknown[0]!r} "
                "(was the task set changed since the checkpoint?)",
                kind="bad_state",
            )
        self._extra = extra
        self._attempts = {tid: int(v[0]) for tid, v in state["stats"].items()}
        self._passes = {tid: int(v[1]) for tid, v in state["stats"].items()}
        self._ema = {tid: float(v[2]) for tid, v in state["stats"].items()}
        self._regressions = {tid: int(k) for tid, k in state["regressions"].items()}
        self.sampled = int(state.get("sampled", 0))
        self._factor = np.asarray([self._band_factor(t.id) for t in self.tasks])
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        self._rng = rng


def load_task_sets(config: TaskPoolConfig) -> tuple[TaskPool, list[Task]]:
    """The training pool and the held-out evaluation tasks from `config` (sources, weights, general
    flags). Training tasks that repeat an evaluation task, exactly up to spacing or as a near-duplicate, are
    removed from training (`tasks.dedup.decontaminate`; counted in `pool.decontamination`); tasks listed in
    `exclude_files` (`trialground.tasks.exclude`) are dropped from both sets first."""
    from trialground.tasks.exclude import read_excluded
    from trialground.tasks.sources import load_source

    excluded = frozenset().union(*(read_excluded(f) for f in config.exclude_files))
    train: list[Task] = []
    weights: dict[str, float] = {}
    groups: dict[str, str] = {}
    general: set[str] = set()
    for i, src in enumerate(config.sources):
        n = config.num_train if src.limit is None else src.limit
        got = [
            t for t in load_source(src.source, seed=config.seed, n=n, split="train") if t.id not in excluded
        ]
        if not got:
            raise TaskError(
                f"task source {src.source!r} has no training tasks (a benchmark such as humaneval is all "
                "split 'eval': list it under eval_sources; or tasks.exclude_files excluded every one)",
                kind="empty",
            )
        for t in got:
            weights.setdefault(t.id, src.weight)
            groups.setdefault(t.id, f"{i}:{src.source}")
            if src.general:
                general.add(t.id)
        train.extend(got)
    evals: list[Task] = []
    for src in config.eval_sources or config.sources:
        n = config.num_eval if src.limit is None else min(src.limit, config.num_eval)
        evals.extend(
            t for t in load_source(src.source, seed=config.seed, n=n, split="eval") if t.id not in excluded
        )
    kept, report = decontaminate(train, evals)
    if train and not kept:
        raise TaskError(
            f"every training task repeats an evaluation task ({len(report.removed_copies)} copies, "
            f"{len(report.removed_near)} near-duplicates): nothing is left to train on",
            kind="empty",
        )
    pool = TaskPool(kept, config, weights=weights, groups=groups, general=general, eval_tasks=evals)
    pool.decontamination = report
    return pool, pool.eval_tasks
