"""Branching rollouts: run the start of a task's episode once, fork its sandbox, continue k times.

`rollout_branched` plays one *trunk* episode until its branch point:
- ``first_obs``: after the first policy turn and its tool output;
- ``first_failure``: after the first turn whose bash/python/run_tests call failed (non-zero exit, a
  timeout or a limit: the observation's ``exec_failed``).
There the trunk's environment is forked k times (`env.fork(1)` per branch, so one failed fork fails one
branch only) and goes back to its owner (the pool); each fork continues the episode with its own
sampling until the end and is closed afterwards. The k branches form one group: their advantages are
taken among siblings that share the prefix.

What is trained: a branch's context starts with the trunk's ids, verbatim (the task prompt, the trunk's
policy turns, the observations; nothing is re-tokenised). Those turns are recorded with role ``prompt``,
so `Trajectory.completion()` -- and with it the loss -- holds only the branch's own turns after the
branch point. The prefix's policy tokens are therefore trained zero times, not k times: within the
group they are the same choice for every sibling, so they have no advantage of their own (with
mean-centred advantages their k gradient contributions would cancel anyway).

Fallback: a trunk that ends before its branch point (it submitted at once, hit the turn limit without a
failing run, or failed) is kept as an ordinary whole episode -- it started from the task's pristine
workspace like any sample -- and the group is completed with k - 1 independent episodes. Its
`BranchInfo.fallback` is set; the completing episodes carry no `BranchInfo`.

Failures are data: a failed fork or a branch whose sandbox dies gives that trajectory an `error`; its
siblings go on. Forked sandboxes are owned here, outside the pool's `max_active` (at most k per trunk).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

import numpy as np

from trialground.envs.base import Environment, Forkable, Observation
from trialground.errors import EnvError
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import (
    EnvFactory,
    Episode,
    Generator,
    _wrap,
    make_env,
    play_turn,
    release_env,
    rollout_group,
    start_episode,
)
from trialground.rollout.chat import ChatRenderer
from trialground.rollout.generation_batcher import GroupBatcher
from trialground.rollout.trajectory import BranchInfo, Trajectory, Turn
from trialground.tasks.model import Task

BranchPoint = Literal["first_obs", "first_failure"]
_SANDBOX_PHASES = ("acquire_s", "reset_s", "env_s", "fork_s")


def at_branch_point(point: BranchPoint, obs: Observation) -> bool:
    """Whether the episode should branch after the turn that produced `obs` (not a final observation)."""
    if point == "first_obs":
        return True
    return obs.exec_failed


def _sandbox_s(timings: dict[str, float]) -> float:
    return sum(timings.get(k, 0.0) for k in _SANDBOX_PHASES)


def _branch_episode(trunk: Episode, info: BranchInfo, index: int) -> Episode:
    """A copy of the trunk's progress whose prefix turns are all prompt turns (masked in the loss)."""
    prefix = [
        Turn(role="prompt", token_ids=u.token_ids, logprobs=u.logprobs, text=u.text) for u in trunk.turns
    ]
    return Episode(
        task=trunk.task,
        group_id=trunk.group_id,
        sample_index=index,
        policy_version=trunk.policy_version,
        turns=prefix,
        versions=list(trunk.versions),
        timings={"generate_s": 0.0, "env_s": 0.0, "fork_s": info.fork_s},
        context=list(trunk.context),
        truncated=trunk.truncated,
        finish_reason=trunk.finish_reason,
        digest=trunk.digest,
        last=trunk.last,
        branch=info,
    )


async def rollout_branched(
    policy: Generator,
    env_factory: EnvFactory,
    task: Task,
    k: int,
    *,
    point: BranchPoint,
    params: SamplingParams,
    group_id: str,
    max_context_tokens: int,
    observation_role: str = "user",
    release: Callable[[Environment], Awaitable[None]] | None = None,
    batch_window_s: float = 0.01,
) -> list[Trajectory]:
    """One group of `k` trajectories of `task` sharing one trunk (see the module docstring), in
    `sample_index` order. Environments come from `env_factory` and go back through `release` (default:
    `env.close()`); forks are closed here. Never raises a boundary error."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    renderer = ChatRenderer(policy.tokenizer)
    trunk_id = f"{group_id}-trunk-{uuid.uuid4().hex[:6]}"
    env: Environment | None = None
    t0 = time.perf_counter()
    try:
        env = await make_env(env_factory)
    except Exception as exc:
        acquire_s = time.perf_counter() - t0
        trunk = Episode(task=task, group_id=group_id, sample_index=0, policy_version=policy.version)
        trunk.fail(_wrap(exc, EnvError, "env_factory"))
    else:
        acquire_s = time.perf_counter() - t0
        try:
            trunk = await _play_trunk(policy, env, task, point, renderer, group_id, params,
                                      max_context_tokens, observation_role)  # fmt: skip
            while not trunk.done and not isinstance(env, Forkable):  # cannot fork: play to the end
                await play_turn(
                    policy, env, trunk, params=params, max_context_tokens=max_context_tokens,
                    renderer=renderer, observation_role=observation_role,
                )  # fmt: skip
        except BaseException:  # cancelled: the trunk's environment still goes back
            await release_env(env, release)
            raise
    trunk.timings["acquire_s"] = acquire_s
    trunk_sandbox_s = _sandbox_s(trunk.timings)
    if trunk.done or env is None or not isinstance(env, Forkable):
        if env is not None:
            await release_env(env, release)
        trunk.branch = BranchInfo(
            trunk_id=trunk_id, point=point, fallback=True, trunk_sandbox_s=trunk_sandbox_s
        )
        rest = await rollout_group(
            policy, env_factory, task, k - 1, params=params, group_id=group_id,
            max_context_tokens=max_context_tokens, observation_role=observation_role, release=release,
            batch_window_s=batch_window_s,
        )  # fmt: skip
        return [
            trunk.trajectory(),
            *(t.model_copy(update={"sample_index": i + 1}) for i, t in enumerate(rest)),
        ]

    prompt_len = len(trunk.turns[0].token_ids)
    info = BranchInfo(
        trunk_id=trunk_id,
        point=point,
        prefix_turns=sum(u.role == "policy" for u in trunk.turns),
        prefix_tokens=len(trunk.context) - prompt_len,
        prefix_policy_tokens=sum(len(u.token_ids) for u in trunk.turns if u.role == "policy"),
        trunk_sandbox_s=trunk_sandbox_s,
    )
    forks: list[Environment | None] = []
    try:
        branches: list[Episode] = []
        try:
            # One fork at a time: a sandbox serialises its forks anyway, and each fork's time is its own.
            for i in range(k):
                f0 = time.perf_counter()
                child: Environment | None = None
                err = None
                try:
                    child = (await env.fork(1))[0]
                except Exception as exc:
                    err = _wrap(exc, EnvError, "env.fork")
                ep = _branch_episode(trunk, info.model_copy(update={"fork_s": time.perf_counter() - f0}), i)
                if err is not None:
                    ep.fail(err)
                forks.append(child)
                branches.append(ep)
        finally:
            await release_env(env, release)  # the trunk's environment is not needed once forked
        batcher = GroupBatcher(policy, live=k, window_s=batch_window_s)

        async def one(ep: Episode, child: Environment | None) -> Trajectory:
            try:
                while not ep.done and child is not None:
                    await play_turn(
                        batcher, child, ep, params=params, max_context_tokens=max_context_tokens,
                        renderer=renderer, observation_role=observation_role,
                    )  # fmt: skip
                return ep.trajectory()
            finally:
                batcher.episode_done()
                if child is not None:
                    await release_env(child, None)  # closed as soon as its branch ends

        return list(await asyncio.gather(*(one(ep, c) for ep, c in zip(branches, forks, strict=True))))
    finally:
        for child in forks:  # closing is idempotent; this catches forks left by a cancellation
            if child is not None:
                await release_env(child, None)


async def _play_trunk(
    policy: Generator,
    env: Environment,
    task: Task,
    point: BranchPoint,
    renderer: ChatRenderer,
    group_id: str,
    params: SamplingParams,
    max_context_tokens: int,
    observation_role: str,
) -> Episode:
    ep = await start_episode(
        env, task, renderer=renderer, group_id=group_id, sample_index=0, policy_version=policy.version,
        max_context_tokens=max_context_tokens,
    )  # fmt: skip
    while not ep.done:
        await play_turn(
            policy, env, ep, params=params, max_context_tokens=max_context_tokens, renderer=renderer,
            observation_role=observation_role,
        )  # fmt: skip
        if not ep.done and ep.last is not None and at_branch_point(point, ep.last):
            break
    return ep


def branch_metrics(groups: Sequence[Sequence[Trajectory]], *, branching: bool) -> dict[str, float]:
    """Sandbox cost per trained sample (both modes) and, when `branching`, the `rollout/branch_*` keys.

    Sandbox seconds = acquiring (pool create or restore), reset, tool runs and grading, and forks; a
    trunk's are counted once for its whole group. A trained sample is a trajectory with a reward."""
    trajs = [t for g in groups for t in g]
    trunks: dict[str, BranchInfo] = {}
    forks: dict[str, list[BranchInfo]] = {}
    own_s = 0.0
    for t in trajs:
        own_s += _sandbox_s(t.timings)
        if t.branch is not None:
            trunks.setdefault(t.branch.trunk_id, t.branch)
            if not t.branch.fallback:
                forks.setdefault(t.branch.trunk_id, []).append(t.branch)
    # A fallback trunk's own timings are its whole episode (already in own_s); a branched trunk's are not.
    shared_s = sum(b.trunk_sandbox_s for b in trunks.values() if not b.fallback)
    generated = sum(len(u.token_ids) for t in trajs for u in t.turns if u.role == "policy")
    generated += sum(b.prefix_policy_tokens for b in trunks.values() if not b.fallback)
    trained = max(1, sum(t.ok for t in trajs))
    out = {
        "rollout/sandbox_s_per_sample": (own_s + shared_s) / trained,
        "rollout/generated_tokens_per_sample": generated / trained,
    }
    for phase in _SANDBOX_PHASES:  # where the sandbox time went (`env`: tool runs and grading)
        spent = sum(t.timings.get(phase, 0.0) for t in trajs)
        out[f"rollout/sandbox_s_per_sample/{phase.removesuffix('_s')}"] = spent / trained
    if branching:
        out["rollout/sandbox_s_per_sample/trunk"] = shared_s / trained
    if branching:
        branched = [b for b in trunks.values() if not b.fallback]
        out["rollout/branch_groups"] = float(len(branched))
        out["rollout/branch_fallbacks"] = float(sum(b.fallback for b in trunks.values()))
        out["rollout/branch_prefix_tokens_mean"] = (
            float(np.mean([b.prefix_tokens for b in branched])) if branched else 0.0
        )
        out["rollout/branch_prefix_turns_mean"] = (
            float(np.mean([b.prefix_turns for b in branched])) if branched else 0.0
        )
        # Whole-episode length of branched trajectories (`rollout/turns_mean` counts only own turns).
        own = [t for t in trajs if t.branch is not None and not t.branch.fallback]
        out["rollout/branch_episode_turns_mean"] = (
            float(np.mean([t.branch.prefix_turns + sum(u.role == "policy" for u in t.turns) for t in own]))  # type: ignore[union-attr]
            if own
            else 0.0
        )
        out["rollout/branch_fork_s_mean"] = (
            float(np.mean([f.fork_s for fs in forks.values() for f in fs])) if forks else 0.0
        )
        # What k independent episodes would have spent re-running each prefix, less the forks' cost.
        out["rollout/branch_sandbox_s_saved"] = float(
            sum(
                (len(fs) - 1) * trunks[tid].trunk_sandbox_s - sum(f.fork_s for f in fs)
                for tid, fs in forks.items()
            )
        )
        out["rollout/branch_generated_tokens_saved"] = float(
            sum((len(fs) - 1) * trunks[tid].prefix_policy_tokens for tid, fs in forks.items())
        )
    return out
