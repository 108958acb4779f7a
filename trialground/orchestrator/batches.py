"""Where each step's trajectories come from: sampled on demand (sync) or ahead of the trainer (async).

Async mode bounds staleness by *admission*: the producer may start collecting the batch for step `s`
only once the trainer has reached version `s - max_staleness`. Long rollouts are never thrown away,
so nothing biases the batch against long tasks; a sample is at most `max_staleness` versions old.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

from trialground.orchestrator.collect import Collector
from trialground.orchestrator.config import LoopConfig
from trialground.policy.base import SamplingParams
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task
from trialground.tasks.pool import TaskPool


@dataclass(frozen=True)
class Batch:
    step: int
    tasks: list[Task]
    groups: list[list[Trajectory]]
    rollout_s: float


class SyncBatches:
    """Sample tasks, roll them out with the current policy, hand them over. Nothing overlaps."""

    def __init__(
        self, collector: Collector, tasks: TaskPool, loop: LoopConfig, sampling: SamplingParams
    ) -> None:
        self.collector, self.tasks, self.loop, self.sampling = collector, tasks, loop, sampling

    async def collect(self, tasks: Sequence[Task]) -> list[list[Trajectory]]:
        """`tasks` rolled out as training samples: k each, branched as configured, with the overlong
        budget of the training sampling."""
        loop = self.loop
        return await self.collector.collect(
            tasks,
            loop.samples_per_task,
            self.sampling,
            branch=loop.branch,
            branch_k=loop.branch_size,
            overlong_budget=self.sampling.max_new_tokens,
        )

    async def next(self, step: int) -> Batch:
        t0 = time.perf_counter()
        tasks = self.tasks.sample(self.loop.batch_tasks)
        groups = await self.collect(tasks)
        return Batch(step, tasks, groups, time.perf_counter() - t0)

    async def close(self) -> None:
        return None


class AsyncBatches(SyncBatches):
    """A producer admits the batch for step `s` once the trainer reaches version `s - max_staleness`, and
    collects every admitted batch at once (up to `max_staleness + 1` in flight), so environment time
    overlaps both the trainer and other batches' generation."""

    def __init__(
        self,
        collector: Collector,
        tasks: TaskPool,
        loop: LoopConfig,
        sampling: SamplingParams,
        first_step: int,
    ) -> None:
        super().__init__(collector, tasks, loop, sampling)
        self.trained = asyncio.Condition()
        self.trainer_step = first_step
        self.wait_s = 0.0
        self.pending: dict[int, asyncio.Task[Batch]] = {}
        self.admitted = asyncio.Event()
        self.producer = asyncio.create_task(self._produce(first_step))

    async def _produce(self, step: int) -> None:
        staleness = self.loop.max_staleness
        while step < self.loop.steps:
            admit_at = step - staleness  # the trainer version this batch may start from
            async with self.trained:
                await self.trained.wait_for(lambda: self.trainer_step >= admit_at)  # noqa: B023
            self.pending[step] = asyncio.create_task(super().next(step))
            self.admitted.set()
            step += 1

    async def next(self, step: int) -> Batch:
        t0 = time.perf_counter()
        while step not in self.pending:
            if self.producer.done():
                self.producer.result()  # re-raise what stopped it
                raise RuntimeError(f"no batch was admitted for step {step}")
            self.admitted.clear()
            await self.admitted.wait()
        batch = await self.pending.pop(step)
        self.wait_s = time.perf_counter() - t0
        return batch

    async def advance(self, trained_step: int) -> None:
        async with self.trained:
            self.trainer_step = trained_step
            self.trained.notify_all()

    async def close(self) -> None:
        for task in [self.producer, *self.pending.values()]:
            task.cancel()
        for task in [self.producer, *self.pending.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
