"""Tree advantages (`trainer.advantage: tree`) against hand-computed values, and through the trainer."""

from __future__ import annotations

import pytest
import torch
from train_helpers import PAD, tiny_llama, traj

from trialground.train.batch import score_groups
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer, build_samples
from trialground.train.tree_advantages import group_tree_advantages

LP = [-1.0, -1.0]


def _ep(actions: list[list[int]], reward: float | None, index: int, group: str = "g") -> object:
    parts: list[tuple[str, list[int], list[float]]] = []
    for j, a in enumerate(actions):
        parts.append(("policy", a, [-1.0] * len(a)))
        if j + 1 < len(actions):
            parts.append(("env", [30 + j], []))
    return traj([1, 2, 3], parts, reward=reward, group=group, index=index)


def test_shared_first_turn_earns_little_and_the_parting_turn_the_difference() -> None:
    # Four siblings; three open with the same turn [5, 6]; of those, two then write [7] (reward 1, 1) and
    # one [8] (reward 0); the fourth opens with [9] and gets 0. Root value 0.5 (dr_grpo: no scaling).
    group = [
        _ep([[5, 6], [7]], 1.0, 0),
        _ep([[5, 6], [7]], 1.0, 1),
        _ep([[5, 6], [8]], 0.0, 2),
        _ep([[9], [7]], 0.0, 3),
    ]
    out = group_tree_advantages(group, "dr_grpo")  # type: ignore[arg-type]
    v_shared = 2 / 3  # the three through [5, 6]
    assert out[0] is not None and out[2] is not None and out[3] is not None
    # first turn: (V - root) + (V - root); second: (r - root) + (r - V)
    assert out[0][1] == pytest.approx((2 * (v_shared - 0.5), (1 - 0.5) + (1 - v_shared)))
    assert out[1] == out[0]
    assert out[2][1] == pytest.approx((2 * (v_shared - 0.5), (0 - 0.5) + (0 - v_shared)))
    assert out[3][1] == pytest.approx((2 * (0 - 0.5), (0 - 0.5) + 0.0))
    # the trajectory-level number is r - root
    assert [o[0] for o in out if o] == pytest.approx([0.5, 0.5, -0.5, -0.5])


def test_no_shared_prefix_is_grpo_with_the_first_turn_doubled() -> None:
    group = [_ep([[5], [6]], 1.0, 0), _ep([[7], [6]], 0.0, 1), _ep([[8]], 0.0, 2)]
    out = group_tree_advantages(group, "grpo", eps=0.0)  # type: ignore[arg-type]
    std = torch.tensor([1.0, 0.0, 0.0]).std().item()
    a0 = (1 - 1 / 3) / std
    assert out[0] is not None and out[0][1] == pytest.approx((2 * a0, a0))
    assert out[2] is not None and out[2][1] == pytest.approx((2 * (0 - 1 / 3) / std,))


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo"])
def test_one_reward_for_the_whole_group_is_exactly_no_signal(method: str) -> None:
    # the float mean of six 1.1s is 1.0999999999999999: without an exact 0, / (0 + eps) gives 2e-10
    group = [_ep([[5], [6]], 1.1, i) for i in range(4)] + [_ep([[5], [7]], 1.1, 4), _ep([[9]], 1.1, 5)]
    out = group_tree_advantages(group, method)  # type: ignore[arg-type]
    assert out == [(0.0, (0.0, 0.0))] * 5 + [(0.0, (0.0,))]


def test_failures_take_no_part_and_get_nothing() -> None:
    clean = group_tree_advantages([_ep([[5], [6]], 1.0, 0), _ep([[5], [7]], 0.0, 1)], "dr_grpo")  # type: ignore[list-item]
    with_failure = group_tree_advantages(
        [_ep([[5], [6]], 1.0, 0), _ep([[5], [8]], None, 1), _ep([[5], [7]], 0.0, 2)],  # type: ignore[list-item]
        "dr_grpo",
    )
    assert with_failure[1] is None
    assert with_failure[0] == clean[0] and with_failure[2] == clean[1]
    alone = group_tree_advantages([_ep([[5]], 1.0, 0), _ep([[6]], None, 1)], "grpo")  # type: ignore[list-item]
    assert alone == [(0.0, (0.0,)), None]


def test_config_selects_it_and_the_trainer_applies_one_advantage_per_turn() -> None:
    group = [_ep([[5, 6], [7]], 1.0, 0), _ep([[5, 6], [8]], 0.0, 1)]
    tree = score_groups([group], TrainerConfig(advantage="tree", algorithm="dr_grpo"))  # type: ignore[list-item]
    flat = score_groups([group], TrainerConfig(algorithm="dr_grpo"))  # type: ignore[list-item]
    assert [r.advantage for r in tree] == [r.advantage for r in flat] == pytest.approx([0.5, -0.5])
    assert flat[0].turn_advantages is None
    # the shared first turn has value 0.5 = root: no credit; the second turn carries all of it
    assert tree[0].turn_advantages == pytest.approx((0.0, 1.0))
    assert tree[1].turn_advantages == pytest.approx((0.0, -1.0))
    sample = build_samples(tree)[0]
    policy = [a for a, m in zip(sample.token_advantages or [], sample.mask, strict=True) if m]
    assert policy == pytest.approx([0.0, 0.0, 1.0])  # two tokens of turn 1, one of turn 2

    # Through the trainer: only the second turn's token moves (the first turn's gradient is zero).
    model = tiny_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(model, TrainerConfig(advantage="tree", algorithm="dr_grpo", lr=1e-2), PAD)
    metrics = trainer.step(tree)
    assert metrics["train/sequences"] == 2.0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_all_zero_turn_advantages_skip_the_step_like_zero_advantages() -> None:
    group = [_ep([[5]], 1.0, 0), _ep([[5]], 1.0, 1)]  # identical: every value equals the root
    tree = score_groups([group], TrainerConfig(advantage="tree"))  # type: ignore[list-item]
    assert all(s.inert for s in build_samples(tree))


def test_branched_trunks_of_one_task_are_subtrees_with_their_own_value() -> None:
    def branch(trunk: int, own: int, reward: float, index: int) -> object:
        return traj(
            [1, 2, 3, trunk], [("policy", [own], [-1.0])], reward=reward, group=f"g{trunk}", index=index
        )

    # trunk 40: rewards 1, 1 (value 1); trunk 41: rewards 0, 1 (value 0.5); root 0.75
    group = [branch(40, 5, 1.0, 0), branch(40, 6, 1.0, 1), branch(41, 5, 0.0, 0), branch(41, 6, 1.0, 1)]
    out = group_tree_advantages(group, "dr_grpo")  # type: ignore[arg-type]
    assert [o[1][0] for o in out if o] == pytest.approx(
        [(1 - 0.75) + (1 - 1), (1 - 0.75) + 0, (0 - 0.75) + (0 - 0.5), (1 - 0.75) + (1 - 0.5)]
    )
    # score_groups sees the two trunks' groups as one tree (same task)
    scored = score_groups([group[:2], group[2:]], TrainerConfig(advantage="tree", algorithm="dr_grpo"))  # type: ignore[list-item]
    assert [s.turn_advantages for s in scored] == [o[1] for o in out if o]
