"""The one place that decides the number a trajectory is trained on: a rubric of named parts.

    rubric = Rubric.from_config(reward_config)
    reward = rubric.score(Facts(graded=graded, actions=actions, policy_tokens=n, budget=max_new_tokens))

`score` runs once per episode, after it is over, and runs every part exactly once, in order. Each part reads
the episode's `Facts` and contributes a `Contribution` (named components, and for a few parts the outcome, a
zeroing, a penalty or a drop); they fold into one `Reward`, whose `total` is a pure function of them:

    total = [outcome + sum(w * v of gated parts)]   when the outcome passed and nothing zeroed it
          + sum(w * v of ungated parts) - penalty   always

Built-in parts (weights and settings from `RewardConfig`):

- `outcome`: 1 when the verdict passed without error or hack flag, else 0 (an episode that ended without a
  grading earns 0); `test_pass_fraction` logged;
- `process`: `process` (weight `process_weight`); `tests_before_submit`, `tool_errors` logged;
- `efficiency`: `redundant_actions` = -count (weight `redundancy_weight`);
- `judge`: the judge's score when it scored this submission (weight `judge_weight`);
- `hack_action`: a hack flag zeroes the total; `penalty` also subtracts `hack_penalty`; `drop` marks the
  reward dropped;
- `infra`: a verdict with an error is dropped (no decision was reached);
- `truncation`: an episode the context budget ended before it was graded: outcome 0, `context_truncated`
  logged, minus `truncation_penalty`;
- `overlong`: DAPO's overlong penalty on the episode's policy tokens against the budget (ungated).

More parts come from `reward.parts` (`PartSpec`: a registered name or a plugin's `package.module:NAME`, a
weight and params validated against the part's own params model); they run after the built-ins. A plugin
is a `Part` whose `score(facts, ctx)` returns a `Contribution`; `ctx.weight` and `ctx.params` are its
configured weight and validated params.

A dropped reward is left out of the group baseline and the loss (`trialground.train.advantages`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from trialground.errors import ConfigError
from trialground.registry import Registry
from trialground.verify.config import PartSpec, RewardConfig
from trialground.verify.reward.model import Reward, RewardComponent
from trialground.verify.reward.shaping import overlong_penalty, process_stats
from trialground.verify.verdict import Action, Graded


@dataclass(frozen=True)
class Facts:
    """What the parts score: one finished episode. `graded` is None for an episode that ended before it was
    graded (the context budget, or a limit without `grade_on_limit`)."""

    graded: Graded | None
    actions: Sequence[Action] = ()
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


class NoParams(BaseModel):
    """A part without settings of its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class PartContext:
    """What a part is configured with: the run's reward settings, its weight and its validated params."""

    config: RewardConfig
    weight: float = 1.0
    params: BaseModel = field(default_factory=NoParams)


Scorer = Callable[[Facts, PartContext], Contribution]


@dataclass(frozen=True)
class Part:
    """A named rubric part: `score(facts, ctx)`, and the params model its settings validate against."""

    name: str
    score: Scorer
    params: type[BaseModel] = NoParams
    doc: str = ""


PARTS: Registry[Part] = Registry("rubric part", Part, ConfigError, error_kind="bad_reward_part")


def _hacked(f: Facts) -> bool:
    return f.graded is not None and any(flag.severity == "hack" for flag in f.graded.verdict.flags)


def _outcome(f: Facts, ctx: PartContext) -> Contribution:
    if f.graded is None:
        return Contribution(outcome=0.0)
    v = f.graded.verdict
    passed = v.passed and v.error is None and not _hacked(f)
    return Contribution(
        components=(RewardComponent(name="test_pass_fraction", value=v.score, weight=0.0),),
        outcome=1.0 if passed else 0.0,
    )


def _process(f: Facts, ctx: PartContext) -> Contribution:
    stats = process_stats(f.actions, ctx.config)
    return Contribution(
        components=(
            RewardComponent(name="process", value=stats.process_score, weight=ctx.config.process_weight),
            RewardComponent(name="tool_errors", value=float(stats.tool_errors), weight=0.0),
            RewardComponent(name="tests_before_submit", value=stats.tests_score, weight=0.0),
        )
    )


def _efficiency(f: Facts, ctx: PartContext) -> Contribution:
    redundant = process_stats(f.actions, ctx.config).redundant
    return Contribution(
        components=(
            RewardComponent(
                name="redundant_actions", value=-float(redundant), weight=ctx.config.redundancy_weight
            ),
        )
    )


def _judge(f: Facts, ctx: PartContext) -> Contribution:
    if f.graded is None or f.graded.judge_score is None:
        return Contribution()
    score = f.graded.judge_score
    return Contribution(
        components=(RewardComponent(name="judge", value=score, weight=ctx.config.judge_weight),)
    )


def _hack_action(f: Facts, ctx: PartContext) -> Contribution:
    if not _hacked(f):
        return Contribution()
    cfg = ctx.config
    return Contribution(
        zeroed=True,
        penalty=cfg.hack_penalty if cfg.hack_action == "penalty" else 0.0,
        dropped=cfg.hack_action == "drop",
    )


def _infra(f: Facts, ctx: PartContext) -> Contribution:
    return Contribution(dropped=f.graded is not None and f.graded.verdict.error is not None)


def _truncation(f: Facts, ctx: PartContext) -> Contribution:
    if not f.cut_by_context or f.graded is not None:
        return Contribution()
    return Contribution(
        components=(RewardComponent(name="context_truncated", value=1.0, weight=0.0),),
        outcome=0.0,
        penalty=ctx.config.truncation_penalty,
    )


def _overlong(f: Facts, ctx: PartContext) -> Contribution:
    budget, cfg = f.budget, ctx.config
    if budget is None or cfg.overlong_penalty == 0.0:
        return Contribution()
    value = overlong_penalty(
        f.policy_tokens, budget, buffer=min(cfg.overlong_buffer, budget), penalty=cfg.overlong_penalty
    )
    return Contribution(components=(RewardComponent(name="overlong", value=value, weight=1.0, gated=False),))


BUILTIN = tuple(
    PARTS.register(p)
    for p in (
        Part("outcome", _outcome, doc="the gate: the verdict passed without error or hack flag"),
        Part("process", _process, doc="process score (process_weight)"),
        Part("efficiency", _efficiency, doc="redundant actions (redundancy_weight)"),
        Part("judge", _judge, doc="the judge's score (judge_weight)"),
        Part("hack_action", _hack_action, doc="a hack flag zeroes, penalises or drops (hack_action)"),
        Part("infra", _infra, doc="a grading that reached no decision is dropped"),
        Part("truncation", _truncation, doc="an episode the context budget ended (truncation_penalty)"),
        Part("overlong", _overlong, doc="DAPO's overlong penalty (overlong_penalty, overlong_buffer)"),
    )
)


@dataclass(frozen=True)
class Rubric:
    """The ordered, configured parts. Pure: the same facts give the same `Reward`."""

    config: RewardConfig = field(default_factory=RewardConfig)
    parts: tuple[tuple[Part, PartContext], ...] = ()

    @classmethod
    def from_config(cls, config: RewardConfig) -> Rubric:
        """The built-in parts, then every `reward.parts` entry; a bad name or params is a `ConfigError`."""
        parts = [(p, PartContext(config)) for p in BUILTIN]
        parts.extend(_configured(spec, config, i) for i, spec in enumerate(config.parts))
        return cls(config, tuple(parts))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p, _ in self.parts)

    def score(self, facts: Facts) -> Reward:
        """The episode's reward: every part once, folded in order."""
        flags = facts.graded.verdict.flags if facts.graded is not None else ()
        return _fold(Reward(outcome=0.0, flags=flags), [p.score(facts, ctx) for p, ctx in self.parts])


def _configured(spec: PartSpec, config: RewardConfig, index: int) -> tuple[Part, PartContext]:
    part = PARTS.lookup(spec.part)
    params = PARTS.params(part.params, spec.params, where=f"reward.parts[{index}] ({spec.part}) ")
    return part, PartContext(config, weight=spec.weight, params=params)


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
