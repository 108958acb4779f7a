"""The run's `Grader` from its configuration: the sandbox, `reward` (with `reward.judge`) and where
grading sandboxes open (an `Opener`: locally by default, on Ray actors with `cluster: ray`)."""

from __future__ import annotations

from trialground.sandbox.base import SandboxConfig
from trialground.verify.code_tests import Opener
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader
from trialground.verify.judge_config import make_judge


def make_grader(sandbox: SandboxConfig, reward: RewardConfig, *, opener: Opener | None = None) -> Grader:
    """A grader with the configured judge (cross-checking `judge_sample_rate` of rule-graded submissions,
    a pass being a score >= `reward.judge.threshold`)."""
    grader = Grader(sandbox, reward, judge=make_judge(reward.judge), opener=opener)
    if reward.judge is not None:
        grader.cross_check.threshold = reward.judge.threshold
    return grader
