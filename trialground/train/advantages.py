"""Group advantages (GRPO, Dr.GRPO, RLOO), dynamic-sampling group filters and the overlong penalty.

Pure functions, torch-free. A reward of `None` marks an infrastructure failure (`Trajectory.error` set or
no reward): it is excluded from the group baseline and gets no advantage (`None`, i.e. masked out of the
gradient) -- never a silent 0. A group with fewer than two valid rewards has no baseline to compare
against, so its valid members get advantage 0.0 (they carry no learning signal, but stay in the batch).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from trialground.rollout.trajectory import Trajectory
from trialground.train.config import TrainerConfig

Method = Literal["grpo", "dr_grpo", "rloo"]


def grpo(rewards: Sequence[float], eps: float = 1e-6) -> np.ndarray:
    """(r - mean) / (std + eps) with the sample std (ddof=1, as TRL and verl do). Needs len >= 2."""
    r = np.asarray(rewards, dtype=np.float64)  # [G]
    return (r - r.mean()) / (r.std(ddof=1) + eps)


def dr_grpo(rewards: Sequence[float]) -> np.ndarray:
    """r - mean: Dr.GRPO drops the std normalisation (it up-weights near-uniform groups)."""
    r = np.asarray(rewards, dtype=np.float64)  # [G]
    return r - r.mean()


def rloo(rewards: Sequence[float]) -> np.ndarray:
    """r_i - mean_{j != i} r_j, i.e. G/(G-1) * (r_i - mean). Needs len >= 2."""
    r = np.asarray(rewards, dtype=np.float64)  # [G]
    g = r.size
    return (r - (r.sum() - r) / (g - 1)).astype(np.float64)


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
    if method == "grpo":
        adv = grpo(values, eps)
    elif method == "dr_grpo":
        adv = dr_grpo(values)
    elif method == "rloo":
        adv = rloo(values)
    else:
        raise ValueError(f"unknown advantage method {method!r}: expected grpo, dr_grpo or rloo")
    for i, a in zip(valid, adv, strict=True):
        out[i] = float(a)
    return out


def overlong_penalty(length: int, max_length: int, *, buffer: int = 0, penalty: float = 1.0) -> float:
    """DAPO's soft overlong punishment, in [-penalty, 0].

    0 while `length <= max_length - buffer`; then falls linearly to `-penalty` at `max_length`; stays
    `-penalty` beyond. `buffer=0` gives the hard version: `-penalty` exactly when the response used the
    whole budget (it was cut).
    """
    if max_length <= 0:
        raise ValueError(f"max_length must be positive, got {max_length}")
    if buffer < 0 or buffer > max_length:
        raise ValueError(f"buffer must be in [0, max_length], got {buffer}")
    if penalty == 0.0:
        return 0.0
    if length >= max_length:
        return -penalty
    threshold = max_length - buffer
    if buffer == 0 or length <= threshold:
        return 0.0
    return -penalty * (length - threshold) / buffer


def trajectory_reward(
    traj: Trajectory, *, max_length: int | None = None, buffer: int = 0, penalty: float = 0.0
) -> float | None:
    """The reward a trajectory is trained on: `Reward.total` plus the overlong penalty on its policy tokens.

    `None` for infrastructure failures. `max_length` is the response budget (e.g. `max_new_tokens`);
    the penalty applies only when both `max_length` and `penalty` are set.
    """
    if not traj.ok or traj.reward is None:
        return None
    total = float(traj.reward.total)
    if max_length is not None and penalty > 0.0:
        n_policy = sum(len(t.token_ids) for t in traj.turns if t.role == "policy")
        total += overlong_penalty(n_policy, max_length, buffer=buffer, penalty=penalty)
    return total


def compute_advantages(
    trajectories: Sequence[Trajectory],
    method: Method = "grpo",
    *,
    eps: float = 1e-6,
    rewards: Sequence[float | None] | None = None,
) -> list[float | None]:
    """Advantages aligned with `trajectories`, baselines taken within each `group_id`.

    `rewards` overrides the per-trajectory reward (e.g. from `trajectory_reward` with an overlong penalty);
    by default it is `Reward.total`, or `None` for a failed trajectory.
    """
    if rewards is None:
        rewards = [trajectory_reward(t) for t in trajectories]
    if len(rewards) != len(trajectories):
        raise ValueError(f"{len(rewards)} rewards for {len(trajectories)} trajectories")
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        by_group[t.group_id].append(i)
    out: list[float | None] = [None] * len(trajectories)
    for idx in by_group.values():
        adv = group_advantages([rewards[i] for i in idx], method, eps=eps)
        for i, a in zip(idx, adv, strict=True):
            out[i] = a
    return out


def advantages_for(
    trajectories: Sequence[Trajectory], config: TrainerConfig, *, max_new_tokens: int | None = None
) -> list[float | None]:
    """`compute_advantages` as `config` asks: its estimator, `adv_eps`, and the overlong penalty
    (`overlong_penalty`, `overlong_buffer`) against `max_new_tokens`, the response budget the policy
    sampled with (for multi-turn episodes: the budget of all policy tokens of an episode)."""
    penalty = config.overlong_penalty if max_new_tokens is not None else 0.0
    buffer = min(config.overlong_buffer, max_new_tokens or 0)
    rewards = [
        trajectory_reward(t, max_length=max_new_tokens, buffer=buffer, penalty=penalty) for t in trajectories
    ]
    return compute_advantages(trajectories, config.algorithm, eps=config.adv_eps, rewards=rewards)


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
        valid = [t for t in group if t.ok]
        failed += len(group) - len(valid)
        if len(valid) < 2:
            too_few += 1
            continue
        values = [reward_of(t) or 0.0 for t in valid]
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
