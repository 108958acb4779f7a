"""Rollout collection: k trajectories per task, all tasks of a batch in flight together.

With `branch` set (training's `loop.branch`), a task's k trajectories come from k / `branch_k` trunks,
each forked into `branch_k` branches that form one group (`group_id` per trunk; see
`trialground.rollout.branching`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Literal

from trialground.orchestrator.components import Components
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout_group
from trialground.rollout.branching import BranchPoint, rollout_branched
from trialground.rollout.generation_batcher import GroupBatcher
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task
from trialground.verify.reward.rubric import finish_all


async def collect(
    c: Components,
    tasks: Sequence[Task],
    k: int,
    params: SamplingParams,
    *,
    branch: BranchPoint | Literal["off"] = "off",
    branch_k: int | None = None,
    overlong_budget: int | None = None,
) -> list[list[Trajectory]]:
    """The `k` trajectories of each task, in task order, each with its final reward (the rubric's `finish`
    parts applied, with the overlong penalty against `overlong_budget` policy tokens; None: no penalty).
    A failed rollout is a trajectory with `error` set; one failure never cancels its siblings (each group
    runs as its own task and records its own errors). With `branch`, they come from `k // branch_k`
    branched groups (`branch_k` default: k)."""
    concurrency = min(len(tasks), c.config.loop.rollout_concurrency)
    limit = asyncio.Semaphore(concurrency)
    # One generate call for every episode waiting on the policy, across groups (not just within one).
    # Its call timings feed the environment pool's autoscaler (generation vs environment time).
    on_generation = c.env_pool.observe_generation if c.env_pool is not None else None
    batcher = GroupBatcher(c.policy, live=concurrency * k, window_s=0.02, on_generation=on_generation)
    size = branch_k or k
    if branch != "off" and k % size != 0:
        raise ValueError(f"branch_k={size} must divide k={k}")

    budget, release = c.config.policy.max_context_tokens, c.env_release
    role = c.config.policy.observation_role

    async def one(task: Task) -> list[Trajectory]:
        async with limit:
            if branch == "off":
                return await rollout_group(
                    batcher, c.env_factory(task), task, k, params=params, group_id=_group_id(task),
                    max_context_tokens=budget, release=release, observation_role=role,
                )  # fmt: skip
            groups = await asyncio.gather(
                *(
                    rollout_branched(
                        batcher,
                        c.env_factory(task),
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
    return finish_all(c.grader.rubric, groups, budget=overlong_budget)


def _group_id(task: Task) -> str:
    return f"{task.id}-{uuid.uuid4().hex[:8]}"
