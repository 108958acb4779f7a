"""Dynamic sampling (DAPO) with refill: a step trains on `batch_tasks` groups that carry a learning signal.

`refill(source, batch)` drops the batch's groups without a signal (`train.advantages.filter_groups`: all
rewards equal, or fewer than two valid samples), then collects groups of newly sampled tasks, with the current
policy, until `batch_tasks` groups are kept or `loop.dynamic_sampling_max_batches` generation batches
(the first included) were run. A refill round samples more tasks than are missing, by the share kept so
far, so a batch where half the groups carry no signal is usually full after one refill. Kept groups
beyond `batch_tasks` are not trained on (their outcomes are still recorded).

Metrics: `filter/groups_in`, `filter/groups_kept` (trained on), `filter/zero_variance_groups`,
`filter/too_few_valid_groups`, `filter/failed_trajectories` (summed over every round),
`filter/generation_batches` (rounds run, 1 = no refill needed), `filter/refill_groups` (kept groups that
came from refills) and `filter/groups_short` (batch_tasks minus groups trained on; > 0 only when the bound
was reached).
"""

from __future__ import annotations

import math
import time

from trialground.orchestrator.batches import Batch, SyncBatches
from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import filter_groups


async def refill(source: SyncBatches, batch: Batch) -> tuple[Batch, list[list[Trajectory]], dict[str, float]]:
    """(every task and group collected, the groups to train on, the `filter/*` metrics). New groups come
    from `source` (its task pool, collector and settings), like the batch's own."""
    loop = source.loop
    want = loop.batch_tasks
    kept, stats = filter_groups(batch.groups)
    totals = stats.as_metrics()
    tasks, groups, seconds = list(batch.tasks), list(batch.groups), batch.rollout_s
    seen, first_kept, rounds = len(batch.groups), len(kept), 1
    while len(kept) < want and rounds < loop.dynamic_sampling_max_batches:
        need = want - len(kept)
        keep_rate = max(len(kept) / max(seen, 1), 0.25)  # at most 4x what is missing
        n = min(math.ceil(need / keep_rate), 4 * want)
        t0 = time.perf_counter()
        more_tasks = source.tasks.sample(n)
        more = await source.collect(more_tasks)
        seconds += time.perf_counter() - t0
        rounds += 1
        more_kept, more_stats = filter_groups(more)
        for key, value in more_stats.as_metrics().items():
            totals[key] += value
        tasks += more_tasks
        groups += more
        seen += len(more)
        kept += more_kept
    kept = kept[:want]
    totals["filter/groups_kept"] = float(len(kept))
    totals["filter/generation_batches"] = float(rounds)
    totals["filter/refill_groups"] = float(max(0, len(kept) - first_kept))
    totals["filter/groups_short"] = float(want - len(kept))
    return Batch(batch.step, tasks, groups, seconds), kept, totals
