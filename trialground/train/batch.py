"""The trainer's batch: a step's scored trajectories with the estimator the trainer is configured with
(trajectory GRPO / Dr.GRPO / RLOO in `advantages.py`, or the turn-level tree estimator in
`tree_advantages.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored, score_trajectories
from trialground.train.config import TrainerConfig
from trialground.train.tree_advantages import score_tree


def score_groups(
    groups: Sequence[Sequence[Trajectory]],
    config: TrainerConfig,
    *,
    kept: Sequence[Sequence[Trajectory]] | None = None,
) -> list[Scored]:
    """The trainer's batch: every trajectory of `groups` scored with `config`'s estimator. With `kept`
    (dynamic sampling: the groups, or parts of groups, chosen to train on), every other trajectory is
    marked `filtered`."""
    flat = [t for g in groups for t in g]
    filtered = None
    if kept is not None:
        keep = {id(t) for g in kept for t in g}
        filtered = [id(t) not in keep for t in flat]
    if config.advantage == "tree":
        return score_tree(flat, config.algorithm, eps=config.adv_eps, filtered=filtered)
    return score_trajectories(flat, config.algorithm, eps=config.adv_eps, filtered=filtered)
