"""The agent loop, token in and token out.

One episode: `env.reset(task)` gives the prompt, rendered once with the chat template; then, until the
environment says `done`: the policy samples from the current ids, its ids (and their sampling logprobs)
are appended verbatim, `env.step(text)` answers, and the answer's ids -- rendered as a `user` (or `tool`)
turn, see `ChatRenderer` -- are appended and masked out of the loss. Nothing is ever re-tokenised, so the
trained tokens are exactly the tokens the policy produced.

Context budget: prompt + every appended token <= `max_context_tokens`. Each generation is capped to the
room left; a generation cut by that cap, or an observation that leaves no room for another turn, ends the
episode with `truncated=True` (a capped single-turn completion is still graded; a multi-turn episode that
runs out of room before finishing ends ungraded, `finish_reason="context_budget"`). The loop decides no
reward: the trajectory carries the environment's `EpisodeEnd` (its grading and actions), and the rubric
scores it once it is over (`trialground.rollout.scoring`).

`rollout` is `start_episode` followed by `play_turn` until the episode is done; the `Episode` they build
can be copied and continued in a forked environment (`trialground.rollout.branching`).

Failures at a boundary -- the policy (PolicyError), the sandbox (SandboxError), grading (VerifierError),
the environment (EnvError) -- end only that episode, recorded as `Trajectory.error`; they are never raised
to the caller or to sibling rollouts. Any other exception at a boundary is wrapped as that boundary's error.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trialground.envs.base import Environment, EpisodeEnd, Observation
from trialground.errors import EnvError, ErrorInfo, PolicyError, TrialgroundError
from trialground.policy.base import Generation, SamplingParams
from trialground.rollout.chat import ChatRenderer
from trialground.rollout.generation_batcher import GroupBatcher
from trialground.rollout.trajectory import CONTEXT_BUDGET, BranchInfo, Trajectory, Turn
from trialground.tasks.model import Task


class Generator(Protocol):
    """What the agent loop needs of a policy (every `Policy` satisfies it)."""

    @property
    def version(self) -> int: ...

    @property
    def tokenizer(self) -> Any: ...

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]: ...


log = logging.getLogger(__name__)

EnvFactory = Callable[[], Environment | Awaitable[Environment]]


def _wrap(exc: Exception, default: type[TrialgroundError], what: str) -> ErrorInfo:
    if isinstance(exc, TrialgroundError):
        return exc.info()
    return default(f"{what} raised {type(exc).__name__}: {exc}", kind="exception").info()


@dataclass
class Episode:
    """One episode in progress: everything `rollout` builds, so that it can be played turn by turn
    (`start_episode`, `play_turn`) and continued from a copy in another environment (branching).

    `context` is exactly the concatenation of every turn's ids; `last` is the latest observation of an
    episode that is not `done`."""

    task: Task
    group_id: str
    sample_index: int
    policy_version: int
    turns: list[Turn] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    timings: dict[str, float] = field(
        default_factory=lambda: {"reset_s": 0.0, "generate_s": 0.0, "env_s": 0.0}
    )
    context: list[int] = field(default_factory=list)
    end: EpisodeEnd | None = None
    error: ErrorInfo | None = None
    truncated: bool = False
    finish_reason: str = ""
    digest: str | None = None
    done: bool = False
    last: Observation | None = None
    branch: BranchInfo | None = None
    t_start: float = field(default_factory=time.perf_counter)

    def fail(self, error: ErrorInfo) -> None:
        self.error, self.done = error, True

    def trajectory(self) -> Trajectory:
        timings = dict(self.timings)
        timings["total_s"] = time.perf_counter() - self.t_start
        return Trajectory(
            task_id=self.task.id,
            group_id=self.group_id,
            sample_index=self.sample_index,
            policy_version=min(self.versions) if self.versions else self.policy_version,
            turns=tuple(self.turns),
            end=self.end,
            error=self.error,
            truncated=self.truncated,
            finish_reason="error" if self.error is not None else self.finish_reason,
            timings=timings,
            workspace_digest=self.digest,
            branch=self.branch,
        )


async def start_episode(
    env: Environment,
    task: Task,
    *,
    renderer: ChatRenderer,
    group_id: str,
    sample_index: int,
    policy_version: int,
    max_context_tokens: int,
) -> Episode:
    """`env.reset(task)` and the rendered prompt. A failure is recorded in the episode (then `done`)."""
    ep = Episode(task=task, group_id=group_id, sample_index=sample_index, policy_version=policy_version)
    t0 = time.perf_counter()
    try:
        obs = await env.reset(task)
    except Exception as exc:
        ep.fail(_wrap(exc, EnvError, "env.reset"))
        return ep
    finally:
        ep.timings["reset_s"] = time.perf_counter() - t0
    start = obs.start
    ep.digest = start.workspace_digest if start is not None else None
    messages = []
    if start is not None and start.system:
        messages.append({"role": "system", "content": start.system})
    messages.append({"role": "user", "content": obs.text})
    tools = list(start.tools) if start is not None and start.tools is not None else None
    try:
        ep.context = renderer.prompt_ids(messages, tools=tools)
    except Exception as exc:  # a template that cannot render this prompt: this episode's failure only
        ep.fail(
            EnvError(f"cannot render the prompt: {type(exc).__name__}: {exc}", kind="render_failed").info()
        )
        return ep
    ep.turns.append(Turn(role="prompt", token_ids=tuple(ep.context), text=obs.text))
    if len(ep.context) >= max_context_tokens:
        ep.fail(
            EnvError(
                f"prompt is {len(ep.context)} tokens, the context budget is {max_context_tokens}",
                kind="prompt_too_long",
            ).info()
        )
        return ep
    ep.last = obs
    return ep


async def play_turn(
    policy: Generator,
    env: Environment,
    ep: Episode,
    *,
    params: SamplingParams,
    max_context_tokens: int,
    renderer: ChatRenderer,
    observation_role: str = "user",
) -> None:
    """One generation and the environment's answer, appended to `ep` (which must not be `done`)."""
    room = max_context_tokens - len(ep.context)
    turn_params = (
        params if room >= params.max_new_tokens else params.model_copy(update={"max_new_tokens": room})
    )
    t0 = time.perf_counter()
    try:
        gens = await policy.generate([ep.context], turn_params)
        if len(gens) != 1:
            raise PolicyError(f"asked for 1 generation, got {len(gens)}", kind="bad_response")
        gen = gens[0]
        if gen.finish_reason == "error":
            raise PolicyError("the policy reported a failed generation", kind="generation_error")
        if len(gen.logprobs) != len(gen.token_ids):
            raise PolicyError(
                f"{len(gen.token_ids)} tokens but {len(gen.logprobs)} logprobs", kind="bad_response"
            )
    except Exception as exc:
        ep.fail(_wrap(exc, PolicyError, "policy.generate"))
        return
    seconds = time.perf_counter() - t0
    ep.timings["generate_s"] += seconds
    ep.versions.append(gen.version)
    ep.turns.append(
        Turn(
            role="policy",
            token_ids=gen.token_ids,
            logprobs=gen.logprobs,
            text=gen.text,
            seconds=seconds,
            version=gen.version,
        )
    )
    ep.context.extend(gen.token_ids)
    ep.finish_reason = gen.finish_reason
    cut_by_budget = turn_params is not params and gen.finish_reason == "length"
    ep.truncated = ep.truncated or cut_by_budget

    t0 = time.perf_counter()
    try:
        obs = await env.step(gen.text)
    except Exception as exc:
        ep.fail(_wrap(exc, EnvError, "env.step"))
        return
    finally:
        ep.timings["env_s"] += time.perf_counter() - t0
    if obs.done:
        ep.done, ep.last, ep.end = True, None, obs.end
        if obs.end is None:
            ep.error = EnvError("the episode ended without an EpisodeEnd", kind="no_end").info()
            return
        ep.error = obs.end.error
        ep.finish_reason = obs.end.finish_reason or ep.finish_reason
        return
    try:
        obs_ids = renderer.observation_ids(obs.text, role=observation_role, after=gen.token_ids)
    except Exception as exc:
        ep.fail(
            EnvError(
                f"cannot render the observation: {type(exc).__name__}: {exc}", kind="render_failed"
            ).info()
        )
        return
    if cut_by_budget or len(ep.context) + len(obs_ids) >= max_context_tokens:
        ep.done, ep.last, ep.truncated = True, None, True
        ep.finish_reason = CONTEXT_BUDGET
        return
    ep.turns.append(
        Turn(role="env", token_ids=tuple(obs_ids), text=obs.text, seconds=time.perf_counter() - t0)
    )
    ep.context.extend(obs_ids)
    ep.last = obs


async def rollout(
    policy: Generator,
    env: Environment,
    task: Task,
    *,
    params: SamplingParams,
    group_id: str,
    sample_index: int,
    max_context_tokens: int,
    observation_role: str = "user",
    renderer: ChatRenderer | None = None,
) -> Trajectory:
    """One episode of `task` in `env` (the caller owns and closes `env`). Never raises a boundary error."""
    renderer = renderer or ChatRenderer(policy.tokenizer)
    ep = await start_episode(
        env,
        task,
        renderer=renderer,
        group_id=group_id,
        sample_index=sample_index,
        policy_version=policy.version,
        max_context_tokens=max_context_tokens,
    )
    while not ep.done:
        await play_turn(
            policy,
            env,
            ep,
            params=params,
            max_context_tokens=max_context_tokens,
            renderer=renderer,
            observation_role=observation_role,
        )
    return ep.trajectory()


async def rollout_group(
    policy: Generator,
    env_factory: EnvFactory,
    task: Task,
    k: int,
    *,
    params: SamplingParams,
    group_id: str,
    max_context_tokens: int,
    observation_role: str = "user",
    release: Callable[[Environment], Awaitable[None]] | None = None,
    batch_window_s: float = 0.01,
) -> list[Trajectory]:
    """k concurrent episodes of `task`, their generations batched: every turn at which all live episodes
    wait on the policy becomes one `policy.generate` call with their prompts (for a single-turn env: one
    call with k prompts); episodes busy in their environment are not waited for longer than
    `batch_window_s`. Environments come from `env_factory` and go back through `release`
    (default: `env.close()`); the seconds `env_factory` took are each trajectory's `timings["acquire_s"]`.
    The result is in `sample_index` order; one failure never affects siblings.
    """
    batcher = GroupBatcher(policy, live=k, window_s=batch_window_s)
    renderer = ChatRenderer(policy.tokenizer)

    async def one(index: int) -> Trajectory:
        # An episode whose environment the infrastructure lost (a Ray worker died under it) is started
        # again from the task on a fresh environment: the policy did nothing wrong, and dropping it would
        # lose a sample of the group. Failures an episode can cause itself are never retried.
        retries = 0
        while True:
            traj = await attempt(index)
            if not _lost_by_infrastructure(traj) or retries >= LOST_ENV_RETRIES:
                return traj.model_copy(update={"retries": retries}) if retries else traj
            retries += 1

    async def attempt(index: int) -> Trajectory:
        env: Environment | None = None
        try:
            t0 = time.perf_counter()
            try:
                env = await make_env(env_factory)
            except Exception as exc:
                return Trajectory(
                    task_id=task.id,
                    group_id=group_id,
                    sample_index=index,
                    policy_version=policy.version,
                    error=_wrap(exc, EnvError, "env_factory"),
                    finish_reason="error",
                    timings={"acquire_s": time.perf_counter() - t0},
                )
            acquire_s = time.perf_counter() - t0
            traj = await rollout(
                batcher,
                env,
                task,
                params=params,
                group_id=group_id,
                sample_index=index,
                max_context_tokens=max_context_tokens,
                observation_role=observation_role,
                renderer=renderer,
            )
            return traj.model_copy(update={"timings": {"acquire_s": acquire_s, **traj.timings}})
        finally:
            if env is not None:
                await release_env(env, release)

    async def counted(index: int) -> Trajectory:
        try:
            return await one(index)
        finally:
            batcher.episode_done()

    return list(await asyncio.gather(*(counted(i) for i in range(k))))


LOST_ENV_RETRIES = 2  # fresh starts of one episode whose environment the infrastructure lost
# SandboxError kinds no submission can cause: a Ray worker that died; the host's view of a workspace
# unmounted from outside (the sandbox's own unmounts never leave its user namespace).
LOST_ENV_KINDS = frozenset({"worker_lost", "workspace_lost"})


def _lost_by_infrastructure(traj: Trajectory) -> bool:
    err = traj.error
    return err is not None and err.boundary == "sandbox" and err.kind in LOST_ENV_KINDS


async def make_env(env_factory: EnvFactory) -> Environment:
    """An environment from `env_factory`, awaited when the factory is asynchronous (the pool)."""
    made = env_factory()
    return await made if inspect.isawaitable(made) else made


async def release_env(env: Environment, release: Callable[[Environment], Awaitable[None]] | None) -> None:
    # A failed close must not turn a finished episode into a failure; the pool sees unhealthy envs itself.
    try:
        await (release(env) if release is not None else env.close())
    except Exception as exc:
        log.warning("releasing environment %s failed: %s: %s", type(env).__name__, type(exc).__name__, exc)
