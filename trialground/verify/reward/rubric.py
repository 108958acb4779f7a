"""The one place that decides the number a trajectory is trained on: a rubric of named parts.

    rubric = Rubric(reward_config)
    reward = rubric.grade(verdict, actions, judge_score=...)   # at grading time (the Grader calls it)
    final = rubric.finish(trajectory, budget=max_new_tokens)   # once the episode is over (collection)

Each part reads the `Facts` of an episode and contributes a `Contribution` (named components, and for a
few parts the outcome, a zeroing, a penalty or a drop). Parts run in order and fold into one `Reward`;
`Reward.total` is then a pure function of the parts' contributions:

    total = [outcome + sum(w * v of gated parts)]   when the outcome passed and nothing zeroed it
          + sum(w * v of ungated parts) - penalty   always

- `outcome` (grade): outcome 1 when the verdict passed without error or hack flag, else 0;
  `test_pass_fraction` logged;
- `process` (grade): `process` (weight `process_weight`); `tests_before_submit`, `tool_errors` logged;
- `efficiency` (grade): `redundant_actions` = -count (weight `redundancy_weight`);
- `judge` (grade): the judge's score when it scored this submission (weight `judge_weight`);
- `hack_action` (grade): a hack flag zeroes the total; `penalty` also subtracts `hack_penalty`; `drop`
  marks the reward dropped;
- `infra` (grade): a verdict with an error is dropped (no decision was reached);
- `truncation` (finish): an episode the context budget ended: outcome 0, `context_truncated` logged,
  minus `truncation_penalty`;
- `overlong` (finish): DAPO's overlong penalty on the episode's policy tokens against the budget
  (ungated: paid whatever the outcome).

A dropped reward is left out of the group baseline and the loss (`trialground.train.advantages`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from trialground.rollout.trajectory import CONTEXT_BUDGET, Trajectory
from trialground.verify.config import RewardConfig
from trialground.verify.reward.model import Reward, RewardComponent
from trialground.verify.reward.shaping import overlong_penalty, process_stats
from trialground.verify.verdict import Action, Verdict


@dataclass(frozen=True)
class Facts:
    """What the parts score. `verdict` is None for an episode that ended before it was graded."""

    verdict: Verdict | None
    actions: Sequence[Action] = ()
    judge_score: float | None = None
    policy_tokens: int = 0
    cut_by_context: bool = False
    budget: int | None = None  # the episode's policy-token budget (the overlong part); None: no budget


@dataclass(frozen=True)
class Contribution:
    """One part's say. `outcome` None: this part does not decide the outcome."""

    components: tuple[RewardComponent, ...] = ()
    outcome: float | None = None
    zeroed: bool = False
    penalty: float = 0.0
    dropped: bool = False


Scorer = Callable[[Facts, RewardConfig], Contribution]
Stage = Literal["grade", "finish"]


@dataclass(frozen=True)
class Part:
    """A named rubric part. `stage`: `grade` parts run when a submission is graded, `finish` parts once the
    trajectory is over (they see its length and how it ended)."""

    name: str
    stage: Stage
    score: Scorer


def _outcome(f: Facts, cfg: RewardConfig) -> Contribution:
    v = f.verdict
    if v is None:
        return Contribution()
    hack = any(flag.severity == "hack" for flag in v.flags)
    passed = v.passed and v.error is None and not hack
    return Contribution(
        components=(RewardComponent(name="test_pass_fraction", value=v.score, weight=0.0),),
        outcome=1.0 if passed else 0.0,
    )


def _process(f: Facts, cfg: RewardConfig) -> Contribution:
    stats = process_stats(f.actions, cfg)
    return Contribution(
        components=(
            RewardComponent(name="process", value=stats.process_score, weight=cfg.process_weight),
            RewardComponent(name="tool_errors", value=float(stats.tool_errors), weight=0.0),
            RewardComponent(name="tests_before_submit", value=stats.tests_score, weight=0.0),
        )
    )


def _efficiency(f: Facts, cfg: RewardConfig) -> Contribution:
    redundant = process_stats(f.actions, cfg).redundant
    return Contribution(
        components=(
            RewardComponent(name="redundant_actions", value=-float(redundant), weight=cfg.redundancy_weight),
        )
    )


def _judge(f: Facts, cfg: RewardConfig) -> Contribution:
    if f.judge_score is None:
        return Contribution()
    return Contribution(
        components=(RewardComponent(name="judge", value=f.judge_score, weight=cfg.judge_weight),)
    )


def _hack_action(f: Facts, cfg: RewardConfig) -> Contribution:
    if f.verdict is None or not any(flag.severity == "hack" for flag in f.verdict.flags):
        return Contribution()
    return Contribution(
        zeroed=True,
        penalty=cfg.hack_penalty if cfg.hack_action == "penalty" else 0.0,
        dropped=cfg.hack_action == "drop",
    )


def _infra(f: Facts, cfg: RewardConfig) -> Contribution:
    return Contribution(dropped=f.verdict is not None and f.verdict.error is not None)


def _truncation(f: Facts, cfg: RewardConfig) -> Contribution:
    if not f.cut_by_context:
        return Contribution()
    return Contribution(
        components=(RewardComponent(name="context_truncated", value=1.0, weight=0.0),),
        outcome=0.0,
        penalty=cfg.truncation_penalty,
    )


def _overlong(f: Facts, cfg: RewardConfig) -> Contribution:
    budget = f.budget
    if budget is None or cfg.overlong_penalty == 0.0:
        return Contribution()
    value = overlong_penalty(
        f.policy_tokens, budget, buffer=min(cfg.overlong_buffer, budget), penalty=cfg.overlong_penalty
    )
    return Contribution(components=(RewardComponent(name="overlong", value=value, weight=1.0, gated=False),))


PARTS = (
    Part("outcome", "grade", _outcome),
    Part("process", "grade", _process),
    Part("efficiency", "grade", _efficiency),
    Part("judge", "grade", _judge),
    Part("hack_action", "grade", _hack_action),
    Part("infra", "grade", _infra),
    Part("truncation", "finish", _truncation),
    Part("overlong", "finish", _overlong),
)


@dataclass(frozen=True)
class Rubric:
    """The ordered parts and the config they read. Pure: the same facts give the same `Reward`."""

    config: RewardConfig = field(default_factory=RewardConfig)
    parts: tuple[Part, ...] = PARTS

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts)

    def _run(self, stage: Stage, facts: Facts) -> list[Contribution]:
        return [p.score(facts, self.config) for p in self.parts if p.stage == stage]

    def grade(
        self, verdict: Verdict, actions: Sequence[Action] = (), *, judge_score: float | None = None
    ) -> Reward:
        """The reward of one graded submission (the `grade` parts)."""
        facts = Facts(verdict=verdict, actions=tuple(actions), judge_score=judge_score)
        return _fold(Reward(outcome=0.0, flags=verdict.flags), self._run("grade", facts))

    def finish(self, traj: Trajectory, *, budget: int | None = None) -> Trajectory:
        """`traj` with its final reward: the graded reward plus the `finish` parts (truncation by the context
        budget, the overlong penalty against `budget` = the policy-token budget of the episode, None: off).
        Infrastructure failures (`traj.error`) are returned unchanged: they have no reward to finish."""
        if traj.error is not None:
            return traj
        cut = traj.finish_reason == CONTEXT_BUDGET and traj.reward is None
        if traj.reward is None and not cut:
            return traj
        n_policy = sum(len(t.token_ids) for t in traj.turns if t.role == "policy")
        facts = Facts(verdict=None, policy_tokens=n_policy, cut_by_context=cut, budget=budget)
        base = traj.reward if traj.reward is not None else Reward(outcome=0.0)
        reward = _fold(base, self._run("finish", facts))
        if reward == traj.reward:
            return traj
        return traj.model_copy(update={"reward": reward})


def _fold(reward: Reward, contributions: Sequence[Contribution]) -> Reward:
    components = list(reward.components)
    outcome, zeroed, penalty, dropped = reward.outcome, reward.zeroed, reward.penalty, reward.dropped
    for c in contributions:
        components.extend(c.components)
        outcome = outcome if c.outcome is None else c.outcome
        zeroed, dropped = zeroed or c.zeroed, dropped or c.dropped
        penalty += c.penalty
    return reward.model_copy(
        update={
            "components": tuple(components),
            "outcome": outcome,
            "zeroed": zeroed,
            "penalty": penalty,
            "dropped": dropped,
        }
    )


def finish_all(
    rubric: Rubric, groups: Sequence[Sequence[Trajectory]], *, budget: int | None
) -> list[list[Trajectory]]:
    """Every trajectory of `groups` through `Rubric.finish`, shapes kept."""
    return [[rubric.finish(t, budget=budget) for t in g] for g in groups]
