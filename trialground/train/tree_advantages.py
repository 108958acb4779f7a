"""Turn-level credit from the tree a group's siblings form (`trainer.advantage: tree`).

The trajectories of one task in a batch form a tree: they share the task prompt (the root), branched
siblings (`loop.branch`) share their trunk's prefix (a node below the root; each trunk's group is one
subtree), and any trajectories whose contexts are token-identical through some policy turn share that
node too (a confident policy often opens the same way). Each node's *value*
is the mean reward of the valid trajectories that pass through it: siblings that share a prefix
estimate what it is worth. A policy turn j of trajectory i, leading from node n(j-1) to node n(j), gets

    A_ij = (V(n_j) - V(root)) + (V(n_j) - V(n_{j-1}))      (n_0: the trajectory's prompt, i.e. its trunk)

the first term the node's worth against the task's baseline (on a path no sibling shares it is the
trajectory's own GRPO numerator r_i - mean), the second the turn's own step in value: a turn shared by
good and bad siblings earns little, the turn where they part earns the difference. With
`trainer.algorithm: grpo` both terms are divided by the group's reward std (+ `adv_eps`), as in GRPO;
`dr_grpo` and `rloo` leave them unscaled (`rloo` takes its root baseline without the trajectory itself).

A node is keyed by every token id of the context through its policy turn (the prompt, the trunk's
prefix, each policy turn and the observations before it), so two siblings share a node only if the policy
saw and wrote exactly the same tokens. Invalid trajectories (no reward: infrastructure failures, dropped
rewards) take no part in any value and get no advantages, as in `train.advantages`.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Method, Scored, score_trajectories, trajectory_reward
from trialground.train.estimators import ESTIMATORS

TurnAdvantages = tuple[float, ...]


def _node_keys(traj: Trajectory) -> tuple[str, list[str]]:
    """The prompt's node (a branch's trunk) and one node per own policy turn: each a digest of the whole
    context through it."""
    h = hashlib.sha256()
    prompt = ""
    keys: list[str] = []
    for turn in traj.turns:
        if turn.role != "prompt" and not prompt:
            prompt = h.copy().hexdigest()
        h.update(turn.role.encode())
        h.update(np.asarray(turn.token_ids, dtype=np.int64).tobytes())
        h.update(b"|")
        if turn.role == "policy":
            keys.append(h.copy().hexdigest())
    return prompt or h.hexdigest(), keys


def group_tree_advantages(
    group: Sequence[Trajectory], method: Method = "grpo", *, eps: float = 1e-6
) -> list[tuple[float, TurnAdvantages] | None]:
    """Per trajectory of one task's tree: (trajectory-level advantage, one advantage per own policy
    turn), or None for a trajectory without a reward. The trajectory-level number is the root term of its last
    turn (what `Scored.advantage` reports); the per-turn tuple is what the loss uses."""
    rewards = [trajectory_reward(t) for t in group]
    valid = [i for i, r in enumerate(rewards) if r is not None]
    out: list[tuple[float, TurnAdvantages] | None] = [None] * len(group)
    nodes = {i: _node_keys(group[i]) for i in valid}
    if len(valid) < 2:  # no sibling to compare against: no signal, as in `group_advantages`
        for i in valid:
            out[i] = (0.0, tuple(0.0 for _ in nodes[i][1]))
        return out
    values = np.asarray([rewards[i] for i in valid], dtype=np.float64)  # [G]
    if np.all(values == values[0]):  # one reward: every node's value is the root's, no signal (exactly 0)
        for i in valid:
            out[i] = (0.0, tuple(0.0 for _ in nodes[i][1]))
        return out
    caps = ESTIMATORS.lookup(method).capabilities
    scale = float(values.std(ddof=1)) + eps if caps.std_normalised else 1.0
    through: dict[str, list[float]] = defaultdict(list)
    for i in valid:
        prompt, keys = nodes[i]
        for key in {prompt, *keys}:
            through[key].append(float(rewards[i]))  # type: ignore[arg-type]
    value = {key: float(np.mean(rs)) for key, rs in through.items()}
    total, g = float(values.sum()), len(valid)
    for i in valid:
        r = float(rewards[i])  # type: ignore[arg-type]
        root = (total - r) / (g - 1) if caps.leave_one_out else total / g
        turn_adv: list[float] = []
        prompt, keys = nodes[i]
        # a trunk below the root has a value of its own; the task's bare prompt is the root itself
        before = value[prompt] if len(through[prompt]) < g else root
        for key in keys:
            v = value[key]
            turn_adv.append(((v - root) + (v - before)) / scale)
            before = v
        out[i] = ((r - root) / scale, tuple(turn_adv))
    return out


def tree_advantages(
    trajectories: Sequence[Trajectory], method: Method = "grpo", *, eps: float = 1e-6
) -> list[tuple[float, TurnAdvantages] | None]:
    """`group_tree_advantages` over each task's trajectories (all its groups: one tree), aligned with
    `trajectories`."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        by_group[t.task_id].append(i)
    out: list[tuple[float, TurnAdvantages] | None] = [None] * len(trajectories)
    for idx in by_group.values():
        for i, a in zip(
            idx, group_tree_advantages([trajectories[i] for i in idx], method, eps=eps), strict=True
        ):
            out[i] = a
    return out


def score_tree(
    trajectories: Sequence[Trajectory],
    method: Method = "grpo",
    *,
    eps: float = 1e-6,
    filtered: Sequence[bool] | None = None,
) -> list[Scored]:
    """`score_trajectories`' records (same rewards and exclusions) carrying tree advantages: `advantage`
    is the trajectory-level root term, `turn_advantages` one value per own policy turn."""
    base = score_trajectories(trajectories, method, eps=eps, filtered=filtered)
    out = []
    for rec, tree in zip(base, tree_advantages(trajectories, method, eps=eps), strict=True):
        if tree is None:
            out.append(rec)
        else:
            out.append(replace(rec, advantage=tree[0], turn_advantages=tree[1]))
    return out
