"""Group advantage estimators: `trainer.algorithm` names one (or a plugin's `package.module:NAME`).

An estimator's `factory` is `(rewards, eps) -> advantages` over one group's valid rewards (numpy arrays,
`[G]`, G >= 2), or its dotted path; its `EstimatorCaps` say how the per-turn (tree) advantages build on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trialground.errors import ConfigError
from trialground.plugin import Plugin
from trialground.registry import Registry


@dataclass(frozen=True)
class EstimatorCaps:
    """How an estimator's baseline and scale are formed, for the tree advantages (`tree_advantages.py`)."""

    std_normalised: bool
    """Advantages are divided by the group's reward std (+ `trainer.adv_eps`)."""
    leave_one_out: bool
    """A sample's baseline is the mean of the others' rewards, not of the whole group's."""


@dataclass(frozen=True)
class Estimator(Plugin[EstimatorCaps]):
    """An advantage estimator (see the module docstring)."""


ESTIMATORS: Registry[Estimator] = Registry("advantage estimator", Estimator, ConfigError, error_kind="config")
for _e in (
    Estimator(
        "grpo",
        "trialground.train.advantages:grpo",
        EstimatorCaps(std_normalised=True, leave_one_out=False),
        doc="(r - mean) / (std + eps)",
    ),
    Estimator(
        "dr_grpo",
        "trialground.train.advantages:dr_grpo",
        EstimatorCaps(std_normalised=False, leave_one_out=False),
        doc="r - mean (Dr.GRPO: no std normalisation)",
    ),
    Estimator(
        "rloo",
        "trialground.train.advantages:rloo",
        EstimatorCaps(std_normalised=False, leave_one_out=True),
        doc="r_i - mean of the others (leave one out)",
    ),
):
    ESTIMATORS.register(_e)
