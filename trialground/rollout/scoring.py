"""The one reward seam: a finished episode in, its reward out.

    traj = score(rubric, traj, budget=max_new_tokens)                 # native loop and evaluation
    reward = score_end(rubric, end, policy_tokens=n, cut_by_context=c) # integrations (TRL, OpenEnv, ...)

Both run `Rubric.score` once over the episode's facts: its `EpisodeEnd` (grading, actions), how many tokens
the policy produced, whether the context budget cut it, and the overlong budget. Every trainer that drives an
episode (the native loop, TRL, verifiers, an OpenEnv client) calls one of these two, so the same episode
earns the same reward whichever drives it.
"""

from __future__ import annotations

from collections.abc import Sequence

from trialground.envs.base import EpisodeEnd
from trialground.rollout.trajectory import CONTEXT_BUDGET, Trajectory
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Facts, Rubric


def score_end(
    rubric: Rubric,
    end: EpisodeEnd | None,
    *,
    policy_tokens: int = 0,
    cut_by_context: bool = False,
    budget: int | None = None,
) -> Reward | None:
    """The reward of an episode that ended with `end`; None for an infrastructure failure (`end.error`),
    which has no reward (it is left out of training)."""
    if end is not None and end.error is not None:
        return None
    facts = Facts(
        graded=end.graded if end is not None else None,
        actions=end.actions if end is not None else (),
        policy_tokens=policy_tokens,
        cut_by_context=cut_by_context,
        budget=budget,
    )
    return rubric.score(facts)


def score(rubric: Rubric, traj: Trajectory, *, budget: int | None = None) -> Trajectory:
    """`traj` with its reward (`budget`: the overlong part's policy-token budget; None: off). A trajectory
    with `error` is returned without one; an episode ended by the context budget is scored ungraded."""
    if traj.error is not None:
        return traj
    cut = traj.finish_reason == CONTEXT_BUDGET and (traj.end is None or traj.end.graded is None)
    if traj.end is None and not cut:
        return traj  # never ended (cannot happen for a finished rollout): nothing to score
    n_policy = sum(len(t.token_ids) for t in traj.turns if t.role == "policy")
    reward = score_end(rubric, traj.end, policy_tokens=n_policy, cut_by_context=cut, budget=budget)
    return traj.model_copy(update={"reward": reward})


def score_all(
    rubric: Rubric, groups: Sequence[Sequence[Trajectory]], *, budget: int | None = None
) -> list[list[Trajectory]]:
    """Every trajectory of `groups` scored, shapes kept."""
    return [[score(rubric, t, budget=budget) for t in g] for g in groups]
