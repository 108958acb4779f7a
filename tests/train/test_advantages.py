"""Advantages, group filtering and the trainer's scored records against hand-computed values."""

from __future__ import annotations

import pytest
from train_helpers import traj

from trialground.errors import ConfigError
from trialground.train.advantages import (
    compute_advantages,
    dr_grpo,
    filter_groups,
    group_advantages,
    grpo,
    rloo,
    trajectory_reward,
)
from trialground.train.batch import score_groups


def test_grpo_hand_values() -> None:
    # mean 0.5; sample std sqrt((4 * 0.25) / 3) = 0.57735
    adv = grpo([1.0, 0.0, 0.0, 1.0], eps=0.0)
    assert adv.tolist() == pytest.approx([0.8660254, -0.8660254, -0.8660254, 0.8660254])
    # rewards 1, 2, 6: mean 3, sample std sqrt((4 + 1 + 9) / 2) = sqrt(7)
    assert grpo([1.0, 2.0, 6.0], eps=0.0).tolist() == pytest.approx([-2 / 7**0.5, -1 / 7**0.5, 3 / 7**0.5])


def test_grpo_eps_and_zero_variance() -> None:
    assert grpo([1.0, 1.0, 1.0]).tolist() == [0.0, 0.0, 0.0]
    # six equal rewards whose float mean is not the reward (1.0999999999999999): exactly 0, not 2e-10
    for method in (grpo, dr_grpo, rloo):
        assert method([1.1] * 6).tolist() == [0.0] * 6
    assert grpo([0.0, 2.0], eps=1.0).tolist() == pytest.approx([-1 / (2**0.5 + 1), 1 / (2**0.5 + 1)])


def test_dr_grpo_hand_values() -> None:
    assert dr_grpo([1.0, 0.0, 0.0, 0.0]).tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert dr_grpo([3.0, 1.0]).tolist() == pytest.approx([1.0, -1.0])


def test_rloo_hand_values() -> None:
    # baseline of each = mean of the others
    assert rloo([1.0, 0.0, 0.0, 0.0]).tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert rloo([1.0, 2.0, 6.0]).tolist() == pytest.approx([1 - 4.0, 2 - 3.5, 6 - 1.5])


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo"])
def test_failures_excluded_from_baseline(method: str) -> None:
    with_failure = group_advantages([1.0, None, 0.0, None, 0.0], method)  # type: ignore[arg-type]
    clean = group_advantages([1.0, 0.0, 0.0], method)  # type: ignore[arg-type]
    assert with_failure[1] is None and with_failure[3] is None
    assert [with_failure[i] for i in (0, 2, 4)] == pytest.approx(clean)


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo"])
def test_groups_with_fewer_than_two_valid(method: str) -> None:
    assert group_advantages([None, 1.0], method) == [None, 0.0]  # type: ignore[arg-type]
    assert group_advantages([None, None], method) == [None, None]  # type: ignore[arg-type]
    assert group_advantages([0.5], method) == [0.0]  # type: ignore[arg-type]
    assert group_advantages([], method) == []  # type: ignore[arg-type]


def test_unknown_method() -> None:
    with pytest.raises(ConfigError, match="unknown advantage estimator 'ppo': known are dr_grpo, grpo, rloo"):
        group_advantages([1.0, 0.0], "ppo")


def test_compute_advantages_groups_by_group_id_and_masks_failures() -> None:
    ts = [
        traj([1], [("policy", [2], [0.0])], reward=1.0, group="a", index=0),
        traj([1], [("policy", [2], [0.0])], reward=3.0, group="b", index=0),
        traj([1], [("policy", [2], [0.0])], reward=0.0, group="a", index=1),
        traj([1], [("policy", [2], [0.0])], reward=1.0, group="b", index=1, error=True),
        traj([1], [("policy", [2], [0.0])], reward=None, group="b", index=2),
        traj([1], [("policy", [2], [0.0])], reward=5.0, group="b", index=3),
    ]
    adv = compute_advantages(ts, "dr_grpo")
    assert adv == pytest.approx([0.5, -1.0, -0.5, None, None, 1.0])  # type: ignore[arg-type]


def test_filter_groups_drops_and_counts() -> None:
    def g(name: str, rewards: list[float | None], errors: tuple[int, ...] = ()) -> list:
        return [
            traj([1], [("policy", [2], [0.0])], reward=r, group=name, index=i, error=i in errors)
            for i, r in enumerate(rewards)
        ]

    groups = [
        g("signal", [1.0, 0.0, 1.0], errors=(2,)),
        g("all_pass", [1.0, 1.0, 1.0]),
        g("all_fail", [0.0, 0.0]),
        g("one_valid", [1.0, None, None]),
        g("signal2", [0.0, 0.5]),
    ]
    kept, stats = filter_groups(groups)
    assert [[t.group_id for t in grp] for grp in kept] == [["signal", "signal"], ["signal2", "signal2"]]
    assert (stats.groups_in, stats.groups_kept, stats.zero_variance, stats.too_few_valid) == (5, 2, 2, 1)
    assert stats.failed_trajectories == 3
    assert stats.as_metrics()["filter/zero_variance_groups"] == 2.0


def test_trajectory_reward_is_none_for_failures_and_dropped_rewards() -> None:
    t = traj([1, 2, 3], [("policy", [4, 5], [0.0, 0.0])], reward=1.0)
    assert trajectory_reward(t) == 1.0
    assert trajectory_reward(traj([1], [("policy", [4], [0.0])], reward=1.0, error=True)) is None
    assert t.reward is not None
    dropped = t.model_copy(update={"reward": t.reward.model_copy(update={"dropped": True})})
    assert trajectory_reward(dropped) is None


def test_score_groups_marks_why_records_are_left_out() -> None:
    from trialground.train.config import TrainerConfig

    good = [
        traj([1], [("policy", [2], [0.0])], reward=r, group="a", index=i) for i, r in enumerate((1.0, 0.0))
    ]
    flat = [traj([1], [("policy", [2], [0.0])], reward=1.0, group="b", index=i) for i in range(2)]
    broken = traj([1], [("policy", [2], [0.0])], reward=1.0, group="a", index=2, error=True)
    groups = [[*good, broken], flat]
    kept, stats = filter_groups(groups)
    scored = score_groups(groups, TrainerConfig(algorithm="dr_grpo"), kept=kept)
    assert [r.excluded for r in scored] == [None, None, "error", "filtered", "filtered"]
    assert [r.advantage for r in scored] == [0.5, -0.5, None, 0.0, 0.0]
    assert [r.trainable for r in scored] == [True, True, False, False, False]
    assert stats.zero_variance == 1
