"""Where each step's trajectories come from: sampled on demand (sync) or ahead of the trainer (async).

Async mode bounds staleness by *admission*: the producer may start collecting the batch for step `s`
only once the trainer has reached version `s - max_staleness`. Long rollouts are never thrown away,
so nothing biases the batch against long tasks; a sample is at most `max_staleness` versions old.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from trialground.orchestrator.collect import collect
from trialground.orchestrator.components import Components
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task


@dataclass(frozen=True)
class Batch:
    step: int
    tasks: list[Task]
    groups: list[list[Trajectory]]
    rollout_s: float


class SyncBatches:
    """Sample tasks, roll them out with the current policy, hand them over. Nothing overlaps."""

    def __init__(self, c: Components) -> None:
        self.c = c

    async def next(self, step: int) -> Batch:
        loop = self.c.config.loop
        t0 = time.perf_counter()
        tasks = self.c.tasks.sample(loop.batch_tasks)
        groups = await collect(self.c, tasks, loop.samples_per_task, self.c.config.policy.sampling)
        return Batch(step, tasks, groups, time.perf_counter() - t0)

    async def close(self) -> None:
        return None


class AsyncBatches(SyncBatches):
    """A producer collects ahead of the trainer through a bounded buffer, paced by `max_staleness`."""

    def __init__(self, c: Components, first_step: int) -> None:
        super().__init__(c)
        self.queue: asyncio.Queue[Batch | BaseException] = asyncio.Queue(
            maxsize=c.config.loop.max_staleness + 1
        )
        self.trained = asyncio.Condition()
        self.trainer_step = first_step
        self.wait_s = 0.0
        self.producer = asyncio.create_task(self._produce(first_step))

    async def _produce(self, step: int) -> None:
        staleness = self.c.config.loop.max_staleness
        try:
            while step < self.c.config.loop.steps:
                admit_at = step - staleness  # the trainer version this batch may start from
                async with self.trained:
                    await self.trained.wait_for(lambda: self.trainer_step >= admit_at)  # noqa: B023
                await self.queue.put(await super().next(step))
                step += 1
        except BaseException as exc:  # handed to the consumer, which re-raises it
            await self.queue.put(exc)
            raise

    async def next(self, step: int) -> Batch:
        t0 = time.perf_counter()
        item = await self.queue.get()
        self.wait_s = time.perf_counter() - t0
        if isinstance(item, BaseException):
            raise item
        return item

    async def advance(self, trained_step: int) -> None:
        async with self.trained:
            self.trainer_step = trained_step
            self.trained.notify_all()

    async def close(self) -> None:
        self.producer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.producer
