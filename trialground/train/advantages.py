"""Group advantages (GRPO, Dr.GRPO, RLOO), dynamic-sampling group filters, and the trainer's batch of
`Scored` records (trajectory, reward, advantage, trainable).

Pure functions, torch-free. The reward is decided by the rubric (`trialground.verify.reward.rubric`); here a
reward of `None` marks a trajectory with nothing to compare (an infrastructure failure, or a reward the
rubric dropped, e.g. `hack_action: drop`): it is excluded from the group baseline and gets no advantage
(`None`, never in the loss) -- never a silent 0. A group with fewer than two valid rewards has no baseline
to compare against, so its valid members get advantage 0.0 (they carry no learning signal, but stay in the
batch).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from trialground.errors import ConfigError
from trialground.rollout.trajectory import Trajectory
from trialground.train.estimators import ESTIMATORS

Method = str
"""An advantage estimator's name in `trialground.train.estimators` (or a plugin's `package.module:NAME`)."""


def grpo(rewards: Sequence[float], eps: float = 1e-6) -> np.ndarray:
    """(r - mean) / (std + eps) with the sample std (ddof=1, as TRL and verl do). Needs len >= 2."""
    r = np.asarray(rewards, dtype=np.float64)  # [G]
    return _centred(r) / (r.std(ddof=1) + eps)


def dr_grpo(rewards: Sequence[float], eps: float = 0.0) -> np.ndarray:
    """r - mean: Dr.GRPO drops the std normalisation (it up-weights near-uniform groups)."""
    return _centred(np.asarray(rewards, dtype=np.float64))


def rloo(rewards: Sequence[float], eps: float = 0.0) -> np.ndarray:
    """r_i - mean_{j != i} r_j, i.e. G/(G-1) * (r_i - mean). Needs len >= 2."""
    r = np.asarray(rewards, dtype=np.float64)  # [G]
    g = r.size
    return _centred(r) * (g / (g - 1))


def _centred(r: np.ndarray) -> np.ndarray:
    """r - mean, exactly 0 for a group of equal rewards: the mean of six 1.1s is 1.0999999999999999, which
    GRPO's division by (0 + eps) would turn into advantages of 2e-10 that count as signal (no skipped
    forward pass, `train/active_sequences`)."""
    if np.all(r == r[0]):
        return np.zeros_like(r)
    return r - r.mean()


def group_advantages(
    rewards: Sequence[float | None], method: Method = "grpo", *, eps: float = 1e-6
) -> list[float | None]:
    """Advantages of one group. `None` rewards (infra failures) -> `None`, excluded from the baseline."""
    valid = [i for i, r in enumerate(rewards) if r is not None]
    out: list[float | None] = [None] * len(rewards)
    if len(valid) < 2:
        for i in valid:
            out[i] = 0.0
        return out
    values = [float(rewards[i]) for i in valid]  # type: ignore[arg-type]
    estimate: Callable[[Sequence[float], float], np.ndarray] = ESTIMATORS.lookup(method).load(
        "advantage estimator", ConfigError
    )
    adv = estimate(values, eps)
    for i, a in zip(valid, adv, strict=True):
        out[i] = float(a)
    return out


def trajectory_reward(traj: Trajectory) -> float | None:
    """The reward a trajectory is trained on (its final `Reward.total`, see
    `trialground.verify.reward.rubric`), or `None` when it has none to compare: an infrastructure failure,
    or a reward the rubric dropped."""
    if not traj.ok or traj.reward is None or traj.reward.dropped:
        return None
    return float(traj.reward.total)


def compute_advantages(
    trajectories: Sequence[Trajectory], method: Method = "grpo", *, eps: float = 1e-6
) -> list[float | None]:
    """Advantages aligned with `trajectories`, baselines taken within each `group_id` over the trajectories
    that have a `trajectory_reward` (the others get `None`)."""
    rewards = [trajectory_reward(t) for t in trajectories]
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        by_group[t.group_id].append(i)
    out: list[float | None] = [None] * len(trajectories)
    for idx in by_group.values():
        adv = group_advantages([rewards[i] for i in idx], method, eps=eps)
        for i, a in zip(idx, adv, strict=True):
            out[i] = a
    return out


Exclusion = Literal["error", "dropped", "filtered", "no_policy_tokens"]


@dataclass(frozen=True)
class Scored:
    """One trajectory as the trainer receives it: its final reward (None: none to train on), its advantage
    and whether it enters the loss (`excluded` says why not). `turn_advantages` (turn-level estimators,
    `trainer.advantage: tree`): one advantage per policy turn of `trajectory.completion()`, in order,
    which the loss uses instead of `advantage`."""

    trajectory: Trajectory
    reward: float | None
    advantage: float | None
    excluded: Exclusion | None = None
    turn_advantages: tuple[float, ...] | None = None

    @property
    def trainable(self) -> bool:
        return self.excluded is None


def _exclusion(traj: Trajectory, advantage: float | None) -> Exclusion | None:
    if not traj.ok:
        return "error"
    if traj.reward is not None and traj.reward.dropped:
        return "dropped"
    return _exclusion_of_tokens(traj, advantage)


def score_trajectories(
    trajectories: Sequence[Trajectory],
    method: Method = "grpo",
    *,
    eps: float = 1e-6,
    filtered: Sequence[bool] | None = None,
) -> list[Scored]:
    """One `Scored` record per trajectory, in order. `filtered[i]`: dynamic sampling left trajectory i's
    group out (it keeps its reward and advantage for the records, and stays out of the loss)."""
    advantages = compute_advantages(trajectories, method, eps=eps)
    out = []
    for i, (traj, adv) in enumerate(zip(trajectories, advantages, strict=True)):
        excluded = _exclusion(traj, adv)
        if excluded is None and filtered is not None and filtered[i]:
            excluded = "filtered"
        out.append(Scored(traj, trajectory_reward(traj), adv, excluded))
    return out


def with_advantages(trajectories: Sequence[Trajectory], advantages: Sequence[float | None]) -> list[Scored]:
    """Records for advantages computed elsewhere (a custom estimator): record i is trainable when
    `advantages[i]` is not None and trajectory i has no error and policy tokens."""
    if len(trajectories) != len(advantages):
        raise ValueError(f"{len(advantages)} advantages for {len(trajectories)} trajectories")
    return [
        Scored(t, trajectory_reward(t), a, "error" if t.error is not None else _exclusion_of_tokens(t, a))
        for t, a in zip(trajectories, advantages, strict=True)
    ]


def _exclusion_of_tokens(traj: Trajectory, advantage: float | None) -> Exclusion | None:
    if advantage is None or not any(t.role == "policy" and t.token_ids for t in traj.turns):
        return "no_policy_tokens"
    return None


@dataclass(frozen=True)
class GroupFilterStats:
    """What `filter_groups` dropped. `as_metrics()` gives namespaced metric keys."""

    groups_in: int
    groups_kept: int
    zero_variance: int
    too_few_valid: int
    failed_trajectories: int

    def as_metrics(self) -> dict[str, float]:
        return {
            "filter/groups_in": float(self.groups_in),
            "filter/groups_kept": float(self.groups_kept),
            "filter/zero_variance_groups": float(self.zero_variance),
            "filter/too_few_valid_groups": float(self.too_few_valid),
            "filter/failed_trajectories": float(self.failed_trajectories),
        }


def filter_groups(
    groups: Sequence[Sequence[Trajectory]],
    *,
    atol: float = 1e-9,
    reward_of: Callable[[Trajectory], float | None] = trajectory_reward,
) -> tuple[list[list[Trajectory]], GroupFilterStats]:
    """Dynamic sampling (DAPO): keep groups that carry a learning signal.

    A kept group has at least two valid (non-failed) trajectories whose rewards (from `reward_of`, by
    default `Reward.total`) are not all equal within `atol`; its failed trajectories are removed (they
    would be masked anyway). Dropped groups are counted by reason so the caller can refill the batch and
    report the rates.
    """
    kept: list[list[Trajectory]] = []
    zero_var = too_few = failed = 0
    for group in groups:
        rewards = [(t, r) for t in group if (r := reward_of(t)) is not None]
        valid = [t for t, _ in rewards]
        failed += len(group) - len(valid)
        if len(valid) < 2:
            too_few += 1
            continue
        values = [r for _, r in rewards]
        if max(values) - min(values) <= atol:
            zero_var += 1
            continue
        kept.append(valid)
    stats = GroupFilterStats(
        groups_in=len(groups),
        groups_kept=len(kept),
        zero_variance=zero_var,
        too_few_valid=too_few,
        failed_trajectories=failed,
    )
    return kept, stats
