"""Rollout collection: k trajectories per task, all tasks of a batch in flight together, each scored.

One `Collector` serves every caller that needs episodes: sync batches, async batches, the dynamic-sampling
refill and evaluation. It holds exactly what collection uses: the policy, where environments come from, the
rubric (the reward seam: `trialground.rollout.scoring`) and the rollout settings.

With `branch` set (training's `loop.branch`), a task's k trajectories come from k / `branch_k` trunks,
each forked into `branch_k` branches that form one group (`group_id` per trunk; see
`trialground.rollout.branching`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from trialground.envs.base import Environment, Grading
from trialground.gateway.episode import harness_group
from trialground.gateway.logprobs import TopSource
from trialground.gateway.server import Gateway
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import EnvFactory, Generator, rollout_group
from trialground.rollout.branching import BranchPoint, rollout_branched
from trialground.rollout.generation_batcher import GroupBatcher
from trialground.rollout.scoring import score_all
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task
from trialground.verify.reward.rubric import Rubric


class EnvSource(Protocol):
    """Where a task's environments come from and go back to (the environment pool satisfies it)."""

    async def acquire(self, task: Task) -> Environment: ...

    async def release(self, env: Environment) -> None: ...

    def observe_generation(self, seconds: float, concurrency: int) -> None: ...


@dataclass(frozen=True)
class RolloutSettings:
    """How episodes are run: concurrency, the context budget and the role observations are rendered as."""

    concurrency: int
    max_context_tokens: int
    observation_role: str = "user"


@dataclass(frozen=True)
class Collector:
    """Episodes of tasks, scored. `envs` None: a fresh environment per episode from `make_env` (the run's
    environment kind, when it needs no sandbox), or a single-turn one over `grader`."""

    policy: Generator
    rubric: Rubric
    settings: RolloutSettings
    grader: Grading
    envs: EnvSource | None = None
    gateway: Gateway | None = None  # env.kind=harness: the programs' endpoint; episodes run through it
    make_env: Callable[[], Environment] | None = None
    # env.kind=harness: where the programs' top_logprobs come from (the policy's; None: refused)
    alternatives: TopSource | None = None

    def _factory(self, task: Task) -> EnvFactory:
        if self.envs is not None:
            envs = self.envs
            return lambda: envs.acquire(task)
        if self.make_env is not None:
            return self.make_env
        from trialground.envs.single_turn import SingleTurnEnv

        grader = self.grader
        return lambda: SingleTurnEnv(grader)

    def _release(self) -> Callable[[Environment], Awaitable[None]] | None:
        return None if self.envs is None else self.envs.release

    async def collect(
        self,
        tasks: Sequence[Task],
        k: int,
        params: SamplingParams,
        *,
        branch: BranchPoint | Literal["off"] = "off",
        branch_k: int | None = None,
        overlong_budget: int | None = None,
        on_group: Callable[[], None] | None = None,
    ) -> list[list[Trajectory]]:
        """The `k` trajectories of each task, in task order, each scored by the rubric (the overlong part
        against `overlong_budget` policy tokens; None: no penalty). A failed rollout is a trajectory with
        `error` set; one failure never cancels its siblings. With `branch`, they come from `k // branch_k`
        branched groups (`branch_k` default: k). `on_group` is called as each task's group ends."""
        s = self.settings
        concurrency = min(len(tasks), s.concurrency)
        limit = asyncio.Semaphore(concurrency)
        # One generate call for every episode waiting on the policy, across groups (not just within one).
        # Its call timings feed the environment pool's autoscaler (generation vs environment time).
        on_generation = self.envs.observe_generation if self.envs is not None else None
        batcher = GroupBatcher(self.policy, live=concurrency * k, window_s=0.02, on_generation=on_generation)
        size = branch_k or k
        if branch != "off" and k % size != 0:
            raise ValueError(f"branch_k={size} must divide k={k}")
        release, budget, role = self._release(), s.max_context_tokens, s.observation_role
        gateway = self.gateway
        if gateway is not None:
            if branch != "off":
                raise ValueError(
                    "loop.branch needs the trainer's own agent loop; env.kind=harness runs yours"
                )
            await gateway.start()

        async def one(task: Task) -> list[Trajectory]:
            group = await one_group(task)
            if on_group is not None:
                on_group()
            return group

        async def one_group(task: Task) -> list[Trajectory]:
            async with limit:
                if gateway is not None:
                    return await harness_group(
                        gateway, batcher, self._factory(task), task, k, params=params,
                        group_id=_group_id(task), max_context_tokens=budget, release=release, tool_role=role,
                        alternatives=self.alternatives,
                    )  # fmt: skip
                if branch == "off":
                    return await rollout_group(
                        batcher, self._factory(task), task, k, params=params, group_id=_group_id(task),
                        max_context_tokens=budget, release=release, observation_role=role,
                    )  # fmt: skip
                groups = await asyncio.gather(
                    *(
                        rollout_branched(
                            batcher,
                            self._factory(task),
                            task,
                            size,
                            point=branch,
                            params=params,
                            group_id=_group_id(task),
                            max_context_tokens=budget,
                            release=release,
                            observation_role=role,
                        )
                        for _ in range(k // size)
                    )
                )
                flat = [t for g in groups for t in g]
                return [t.model_copy(update={"sample_index": i}) for i, t in enumerate(flat)]

        groups = await asyncio.gather(*(one(t) for t in tasks))
        return score_all(self.rubric, groups, budget=overlong_budget)


def _group_id(task: Task) -> str:
    return f"{task.id}-{uuid.uuid4().hex[:8]}"
