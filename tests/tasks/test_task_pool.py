"""TaskPool: weights, bands, general ratio, regressions, determinism, checkpoint round trip."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from trialground.errors import TaskError
from trialground.tasks.config import TaskPoolConfig, TaskSourceConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.pool import TaskPool, load_task_sets


def _tasks(n: int, domain: str = "math", split: str = "train", tag: str = "") -> list[Task]:
    return [
        Task(
            domain=domain,
            prompt=f"{tag}{domain} problem {i}",
            verifier=VerifierSpec(kind="exact", params={"answer": str(i)}),
            split=split,  # type: ignore[arg-type]
            metadata={"source": f"{domain}{tag}"},
        )
        for i in range(n)
    ]


def _freq(pool: TaskPool, draws: int, batch: int = 4) -> Counter[str]:
    c: Counter[str] = Counter()
    for _ in range(draws):
        c.update(t.id for t in pool.sample(batch))
    return c


def test_groups_get_mass_by_weight_not_size() -> None:
    small, big = _tasks(5, "math"), _tasks(50, "code")
    weights = {t.id: 3.0 for t in small} | {t.id: 1.0 for t in big}
    pool = TaskPool(small + big, TaskPoolConfig(seed=1), weights=weights)
    p = pool.probabilities()
    assert sum(p[t.id] for t in small) == pytest.approx(0.75)
    counts = _freq(pool, 1000, batch=1)
    share = sum(counts[t.id] for t in small) / 1000
    assert 0.70 < share < 0.80


def test_domain_weights_and_zero_weight() -> None:
    a, b = _tasks(10, "math"), _tasks(10, "code")
    pool = TaskPool(a + b, TaskPoolConfig(domain_weights={"code": 0.0}))
    assert {t.domain for t in pool.sample(8)} == {"math"}


def test_bands_sample_always_and_never_solved_less() -> None:
    tasks = _tasks(3)
    easy, hard, mid = (t.id for t in tasks)
    cfg = TaskPoolConfig(seed=0, band_min_attempts=4, easy_weight=0.1, hard_weight=0.5)
    pool = TaskPool(tasks, cfg)
    for _ in range(6):
        pool.record(easy, True)
        pool.record(hard, False)
    pool.record(mid, True)
    assert (pool.band(easy), pool.band(hard), pool.band(mid)) == ("easy", "hard", "new")
    for passed in (False, True, False, True, False):
        pool.record(mid, passed)
    assert pool.band(mid) == "learning"
    p = pool.probabilities()
    assert p[easy] == pytest.approx(0.1 / 1.6) and p[hard] == pytest.approx(0.5 / 1.6)
    assert p[mid] == pytest.approx(1.0 / 1.6)
    stats = pool.stats()
    assert (
        stats["tasks/band_easy"] == 1 and stats["tasks/band_hard"] == 1 and stats["tasks/band_learning"] == 1
    )


def test_pass_rate_is_an_ema() -> None:
    (t,) = _tasks(1)
    pool = TaskPool([t], TaskPoolConfig(ema_alpha=0.5))
    assert pool.pass_rate(t.id) is None
    pool.record(t.id, True)
    pool.record(t.id, False)
    pool.record(t.id, False)
    assert pool.pass_rate(t.id) == pytest.approx(0.25)


def test_general_ratio() -> None:
    special, general = _tasks(20, "code"), _tasks(20, "chat")
    pool = TaskPool(
        special + general, TaskPoolConfig(seed=3, general_ratio=0.25), general={t.id for t in general}
    )
    picked = [t for _ in range(200) for t in pool.sample(10)]
    share = sum(t.domain == "chat" for t in picked) / len(picked)
    assert 0.22 < share < 0.28


def test_regressions_come_back_weighted_and_leave_after_passing() -> None:
    train = _tasks(20)
    evals = _tasks(3, "math", split="eval", tag="held-out ")
    cfg = TaskPoolConfig(seed=0, regression_weight=10.0, regression_passes=2)
    pool = TaskPool(train, cfg)
    assert all(t.split == "train" for t in pool.sample(20))
    with pytest.raises(TaskError, match="unknown task"):
        pool.add_regressions([evals[0].id])
    pool.add_regressions([evals[0].id, train[0].id], tasks=evals)
    p = pool.probabilities()
    assert p[evals[0].id] == pytest.approx(10 * p[train[1].id])
    assert p[train[0].id] == pytest.approx(10 * p[train[1].id])
    counts = _freq(pool, 300, batch=1)
    assert counts[evals[0].id] > 5 * counts[train[1].id]
    pool.record(evals[0].id, True)
    assert evals[0].id in pool.regressions
    pool.record(evals[0].id, True)
    assert evals[0].id not in pool.regressions
    assert evals[0].id not in pool.probabilities()


def test_eval_split_tasks_never_sampled() -> None:
    pool = TaskPool(_tasks(5) + _tasks(5, split="eval", tag="e"), TaskPoolConfig())
    assert len(pool.tasks) == 5 and len(pool.eval_tasks) == 5
    assert all(t.split == "train" for t in pool.sample(50))


def test_without_replacement_within_a_batch() -> None:
    pool = TaskPool(_tasks(10), TaskPoolConfig())
    batch = pool.sample(10)
    assert len({t.id for t in batch}) == 10
    assert len(pool.sample(25)) == 25  # more than there are: the rest with replacement


def test_deterministic_under_seed() -> None:
    def run(seed: int) -> list[str]:
        pool = TaskPool(_tasks(30), TaskPoolConfig(seed=seed))
        out = []
        for step in range(5):
            batch = pool.sample(4)
            out += [t.id for t in batch]
            for i, t in enumerate(batch):
                pool.record(t.id, (i + step) % 3 == 0)
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_state_round_trip_resumes_exactly() -> None:
    train, evals = _tasks(40), _tasks(2, split="eval", tag="x")
    cfg = TaskPoolConfig(seed=5, band_min_attempts=2, general_ratio=0.3)
    general = {t.id for t in train[:10]}

    def fresh() -> TaskPool:
        return TaskPool(train, cfg, general=general, eval_tasks=evals)

    pool = fresh()
    for _ in range(6):
        for t in pool.sample(5):
            pool.record(t.id, t.id < "8")
    pool.add_regressions([evals[0].id], tasks=evals)
    state = json.loads(json.dumps(pool.state_dict()))  # checkpoints are JSON
    expected = [[t.id for t in pool.sample(5)] for _ in range(5)]
    resumed = fresh()
    resumed.load_state_dict(state)
    assert [[t.id for t in resumed.sample(5)] for _ in range(5)] == expected
    assert resumed.regressions == [evals[0].id]


def test_state_for_a_different_task_set_is_refused() -> None:
    pool = TaskPool(_tasks(5), TaskPoolConfig())
    pool.record(pool.tasks[0].id, True)
    other = TaskPool(_tasks(5, tag="other "), TaskPoolConfig())
    with pytest.raises(TaskError, match="not in this pool"):
        other.load_state_dict(pool.state_dict())
    with pytest.raises(TaskError, match="unsupported version"):
        other.load_state_dict({"version": 99})


def test_errors() -> None:
    with pytest.raises(TaskError, match="empty"):
        TaskPool(_tasks(3, split="eval"), TaskPoolConfig())
    pool = TaskPool(_tasks(3), TaskPoolConfig())
    with pytest.raises(TaskError, match="unknown task"):
        pool.record("nope", True)
    with pytest.raises(TaskError, match="n must be >= 1"):
        pool.sample(0)
    zero_easy = TaskPool(_tasks(2), TaskPoolConfig(easy_weight=0.0, band_min_attempts=1))
    for t in zero_easy.tasks:
        zero_easy.record(t.id, True)
    with pytest.raises(TaskError, match="positive sampling weight"):
        zero_easy.sample(1)
    with pytest.raises(ValueError, match="hard_threshold"):
        TaskPoolConfig(hard_threshold=0.9, easy_threshold=0.5)


def test_load_task_sets_from_config() -> None:
    cfg = TaskPoolConfig(
        sources=(
            TaskSourceConfig(source="data", weight=1.0, limit=30),
            TaskSourceConfig(source="math", weight=3.0, general=True),
        ),
        num_eval=5,
        general_ratio=0.5,
    )
    pool, evals = load_task_sets(cfg)
    assert {t.domain for t in pool.tasks} == {"data", "math"}
    assert evals and all(t.split == "eval" for t in evals)
    assert not {t.id for t in pool.tasks} & {t.id for t in evals}
    batch = pool.sample(10)
    assert sum(t.domain == "math" for t in batch) in range(3, 8)


def test_a_forgotten_task_is_requeued_until_it_passes_again() -> None:
    tasks = _tasks(3)
    pool = TaskPool(tasks, TaskPoolConfig(seed=0, requeue_pass_rate=0.5, regression_passes=1))
    a, b = tasks[0].id, tasks[1].id
    assert not pool.record_group(a, [False, False])  # never passed: hard, not forgotten
    assert not pool.record_group(b, [True, True, False])
    assert not pool.record_group(b, [True, False])  # a pass in the group: still known
    assert pool.regressions == []
    assert pool.record_group(b, [False, False, False])  # passed before, a whole group fails now
    assert pool.regressions == [b]
    assert not pool.record_group(b, [False])  # already queued: once
    pool.record_group(b, [True])
    assert pool.regressions == []
    off = TaskPool(tasks, TaskPoolConfig(seed=0, requeue_pass_rate=None))
    off.record_group(a, [True])
    assert not off.record_group(a, [False]) and off.regressions == []
