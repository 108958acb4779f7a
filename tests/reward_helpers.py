"""Test helpers over the one reward seam: a grading or an environment's end, scored as the loop scores it."""

from __future__ import annotations

from typing import Any

from trialground.envs.base import EpisodeEnd, Observation
from trialground.orchestrator.metrics import grading_metrics
from trialground.rollout.scoring import score, score_end
from trialground.rollout.trajectory import Trajectory
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Facts, Rubric
from trialground.verify.verdict import Graded, Verdict


async def grade_and_score(grader: Grader, task: Any, submission: str, **kw: Any) -> tuple[Verdict, Reward]:
    """(verdict, reward) of one submission: the grader's verdict, the rubric of its reward config."""
    graded = await grader.grade(task, submission, **kw)
    facts = Facts(graded=graded, actions=tuple(kw.get("actions", ())))
    return graded.verdict, Rubric.from_config(grader.reward_config).score(facts)


def verdict_of(obs: Observation) -> Verdict | None:
    """The verdict an episode's final observation carries (None: ungraded, or not the end)."""
    end = obs.end
    return end.graded.verdict if end is not None and end.graded is not None else None


def reward_of(obs: Observation | EpisodeEnd | None, config: RewardConfig | None = None) -> Reward | None:
    """The reward of an episode that ended with `obs` (None: an infrastructure failure or not the end)."""
    end = obs.end if isinstance(obs, Observation) else obs
    if end is None:
        return None
    return score_end(Rubric.from_config(config or RewardConfig()), end)


def error_of(obs: Observation) -> Any:
    return obs.end.error if obs.end is not None else None


def finish_reason_of(obs: Observation) -> str | None:
    return obs.end.finish_reason if obs.end is not None else None


def step_metrics(gradeds: list[Graded], config: RewardConfig | None = None) -> dict[str, float]:
    """The `verify/*` and `hack/*` metrics a training step with these gradings logs (one group)."""
    trajs = [
        Trajectory(
            task_id=f"t{i}",
            group_id="g",
            sample_index=i,
            policy_version=0,
            end=EpisodeEnd(finish_reason="submitted", graded=g, error=g.verdict.error),
        )
        for i, g in enumerate(gradeds)
    ]
    return grading_metrics([trajs], {}, config or RewardConfig())


async def grade_scored(grader: Grader, task: Any, submission: str, **kw: Any) -> tuple[Graded, Reward]:
    graded = await grader.grade(task, submission, **kw)
    facts = Facts(graded=graded, actions=tuple(kw.get("actions", ())))
    return graded, Rubric.from_config(grader.reward_config).score(facts)


def scored(traj: Any, config: RewardConfig | None = None, *, budget: int | None = None) -> Any:
    """A finished rollout (a trajectory, or a list of them) scored as the loop's collection scores it."""
    rubric = Rubric.from_config(config or RewardConfig())
    if isinstance(traj, list):
        return [score(rubric, t, budget=budget) for t in traj]
    return score(rubric, traj, budget=budget)
