"""The policy-version lag of every trained token: a trajectory whose calls were sampled by two versions
(a harness episode across a weight push) counts each turn's tokens at its own lag, which the
per-trajectory lag (its oldest version) cannot show."""

from __future__ import annotations

from trialground.orchestrator.metrics import rollout_metrics
from trialground.rollout.trajectory import Trajectory, Turn
from trialground.verify.reward.model import Reward


def _traj(turns: list[Turn], version: int, *, ok: bool = True) -> Trajectory:
    return Trajectory(
        task_id="t",
        group_id="g",
        sample_index=0,
        policy_version=version,
        turns=turns,
        reward=Reward(outcome=1.0) if ok else None,
    )


def test_each_trained_token_is_counted_at_the_version_that_sampled_it() -> None:
    mixed = _traj(
        [
            Turn(role="prompt", token_ids=(1, 2)),
            Turn(role="policy", token_ids=(3, 4, 5), version=3),  # 2 behind version 5
            Turn(role="env", token_ids=(6,)),
            Turn(role="policy", token_ids=(7,), version=5),  # current
        ],
        3,
    )
    unstamped = _traj([Turn(role="policy", token_ids=(8, 9, 10, 11))], 4)  # 1 behind: the trajectory's
    dropped = _traj([Turn(role="policy", token_ids=(12,) * 50, version=0)], 0, ok=False)  # not trained
    m = rollout_metrics([[mixed, unstamped, dropped]], {}, 5)
    assert m["async/token_staleness_mean"] == (3 * 2 + 1 * 0 + 4 * 1) / 8
    assert m["async/token_staleness_max"] == 2.0
    assert m["async/stale_token_frac"] == 7 / 8
    assert m["async/staleness_max"] == 5.0  # per trajectory, over every trajectory
