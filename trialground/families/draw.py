"""How a generated family draws its tasks: `draw_tasks(family, n, seed, split, instance)`.

Shared by every family folder (none imports another): the family gives `instance`, which draws one
instance from the generator and returns its key and how to build its task; this module keeps the
drawing deterministic in `(family, seed)`, drops repeats, and puts an instance in the split a hash of its
key names (`split_of`), so the train and eval splits never share an instance.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from trialground.tasks.model import Split, Task, split_of

Instance = Callable[[random.Random], tuple[str, Callable[[], Task]]]


def draw_tasks(
    family: str, n: int, seed: int, split: Split, instance: Instance, *, max_misses: int = 200_000
) -> list[Task]:
    """`n` distinct tasks of `split`; a ValueError when `max_misses` draws in all are repeats or of the
    other split (a generator too small for `n`)."""
    rng = random.Random(f"{family}:{seed}")
    out: list[Task] = []
    seen: set[str] = set()
    misses = 0
    while len(out) < n:
        key, build = instance(rng)
        if key in seen or split_of(key, namespace=family) != split:
            misses += 1
            if misses > max_misses:
                raise ValueError(f"{family}: cannot make {n} distinct {split} tasks (made {len(out)})")
            continue
        seen.add(key)
        out.append(build())
    return out
