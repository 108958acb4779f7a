"""Harness episodes: k runs of the user's program per task, each answered through its own gateway
session, stitched into token-exact trajectories (`stitch.py`).

`harness_group` is to harness environments what `rollout.agent.rollout_group` is to tool environments:
environments from the same factory (the pool), released the same way, generations of the k episodes
batched together, one failure never affecting its siblings. An episode whose program made no model call is
an environment error (`no_calls`, excluded from the baseline): there is nothing the policy did to credit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from trialground.envs.base import Environment
from trialground.envs.harness import HarnessEnv
from trialground.errors import EnvError, ErrorInfo, TrialgroundError
from trialground.gateway.budget import SessionBudget
from trialground.gateway.logprobs import TopSource
from trialground.gateway.server import Gateway
from trialground.gateway.session import Generator, Session
from trialground.gateway.stitch import stitch
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import EnvFactory, make_env, release_env
from trialground.rollout.generation_batcher import GroupBatcher
from trialground.rollout.trajectory import CONTEXT_BUDGET, Trajectory
from trialground.tasks.model import Task


def _error(exc: Exception, what: str) -> ErrorInfo:
    if isinstance(exc, TrialgroundError):
        return exc.info()
    return EnvError(f"{what} raised {type(exc).__name__}: {exc}", kind="exception").info()


async def harness_episode(
    gateway: Gateway,
    generator: Generator,
    env: HarnessEnv,
    task: Task,
    *,
    params: SamplingParams,
    group_id: str,
    sample_index: int,
    max_context_tokens: int,
    tool_role: str = "tool",
    served_name: str = "policy",
    alternatives: TopSource | None = None,
) -> Trajectory:
    """One run of the program on `task` in `env` (the caller owns and closes `env`). Never raises."""
    t_start = time.perf_counter()
    base = {"task_id": task.id, "group_id": group_id, "sample_index": sample_index}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        first = await env.reset(task)
    except Exception as exc:
        return Trajectory(
            **base, policy_version=generator.version, error=_error(exc, "env.reset"), finish_reason="error"
        )
    timings["reset_s"] = time.perf_counter() - t0
    digest = first.start.workspace_digest if first.start is not None else None
    cfg = env.config
    budget = SessionBudget.for_episode(
        cfg.max_turns,
        cfg.harness_max_n,
        params.max_new_tokens,
        cfg.harness_max_inflight,
        connections=cfg.harness_max_connections,
        body_mb=cfg.harness_max_body_mb,
    )
    session = Session(
        generator,
        params,
        served_name,
        max_context_tokens=max_context_tokens,
        tool_role=tool_role,
        budget=budget,
        alternatives=alternatives,
    )
    endpoint = gateway.open(session)
    t0 = time.perf_counter()
    try:
        if endpoint.socket is None:
            raise EnvError("the gateway gave this episode no unix socket: start it first", kind="config")
        final = await env.play(endpoint.path, endpoint.key, stop=session.ended, socket=endpoint.socket)
    except Exception as exc:
        gateway.close(endpoint.sid)
        return Trajectory(
            **base, policy_version=generator.version, error=_error(exc, "env.play"), finish_reason="error"
        )
    gateway.close(endpoint.sid)
    timings["env_s"] = time.perf_counter() - t0
    timings["generate_s"] = sum(r.seconds for r in session.records)
    timings["total_s"] = time.perf_counter() - t_start
    joined = stitch(session.records)
    end = final.end
    error = (
        end.error
        if end is not None
        else EnvError("the episode ended without an EpisodeEnd", kind="no_end").info()
    )
    if error is None and not session.records:
        said = final.text.strip()[-300:]
        error = EnvError(
            f"the harness program made no model call; it printed: {said!r}", kind="no_calls"
        ).info()
    finish = end.finish_reason if end is not None else ""
    if session.truncated and not finish.startswith("exited"):
        finish = CONTEXT_BUDGET
    return Trajectory(
        **base,
        policy_version=min(joined.versions) if joined.versions else generator.version,
        turns=joined.turns,
        end=end,
        error=error,
        truncated=session.truncated,
        finish_reason="error" if error is not None else finish,
        timings=timings,
        workspace_digest=digest,
    )


async def harness_group(
    gateway: Gateway,
    generator: Generator,
    env_factory: EnvFactory,
    task: Task,
    k: int,
    *,
    params: SamplingParams,
    group_id: str,
    max_context_tokens: int,
    tool_role: str = "tool",
    release: Callable[[Environment], Awaitable[None]] | None = None,
    batch_window_s: float = 0.01,
    alternatives: TopSource | None = None,
) -> list[Trajectory]:
    """k concurrent runs of the program on `task`, in `sample_index` order. `alternatives`: where the
    programs' `top_logprobs` come from (the policy's `alternatives`; None: refused)."""
    batcher = GroupBatcher(generator, live=k, window_s=batch_window_s)

    async def one(index: int) -> Trajectory:
        env: Environment | None = None
        try:
            t0 = time.perf_counter()
            try:
                env = await make_env(env_factory)
                if not isinstance(env, HarnessEnv):
                    raise EnvError(f"env.kind=harness got a {type(env).__name__}", kind="config")
            except Exception as exc:
                return Trajectory(
                    task_id=task.id, group_id=group_id, sample_index=index, policy_version=generator.version,
                    error=_error(exc, "env_factory"), finish_reason="error",
                    timings={"acquire_s": time.perf_counter() - t0},
                )  # fmt: skip
            acquire_s = time.perf_counter() - t0
            traj = await harness_episode(
                gateway, batcher, env, task, params=params, group_id=group_id, sample_index=index,
                max_context_tokens=max_context_tokens, tool_role=tool_role, alternatives=alternatives,
            )  # fmt: skip
            return traj.model_copy(update={"timings": {"acquire_s": acquire_s, **traj.timings}})
        finally:
            batcher.episode_done()
            if env is not None:
                await release_env(env, release)

    return list(await asyncio.gather(*(one(i) for i in range(k))))
