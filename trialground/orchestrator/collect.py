"""Rollout collection: k trajectories per task, all tasks of a batch in flight together."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from trialground.orchestrator.components import Components
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout_group
from trialground.rollout.batching import GroupBatcher
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task


async def collect(
    c: Components, tasks: Sequence[Task], k: int, params: SamplingParams
) -> list[list[Trajectory]]:
    """One group of `k` trajectories per task. A failed rollout is a trajectory with `error` set; one
    failure never cancels its siblings (each group runs as its own task and records its own errors)."""
    concurrency = min(len(tasks), c.config.loop.rollout_concurrency)
    limit = asyncio.Semaphore(concurrency)
    # One generate call for every episode waiting on the policy, across groups (not just within one).
    batcher = GroupBatcher(c.policy, live=concurrency * k, window_s=0.02)

    async def one(task: Task) -> list[Trajectory]:
        async with limit:
            return await rollout_group(
                batcher,
                c.env_factory(task),
                task,
                k,
                params=params,
                group_id=f"{task.id}-{uuid.uuid4().hex[:8]}",
                max_context_tokens=c.config.policy.max_context_tokens,
                release=c.env_release,
            )

    return list(await asyncio.gather(*(one(t) for t in tasks)))
