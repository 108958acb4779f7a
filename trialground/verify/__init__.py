"""Verifiers, the reward, hack detection and judges.

- `verdict`: what grading decides (`Verdict`, `Flag`, `TestResult`, `Action`);
- `grader`: the one `Grader` and its factory `make_grader`;
- `kinds/`: the verifier registry and one module per built-in kind;
- `reward/`: the `Reward`, the rubric of named parts that decides it, shaping measurements;
- `sandboxed/`: programs that run inside a grading sandbox;
- `judges/`: judges and reward models; `detectors/`: hack detectors (evidence, never a verdict);
- `validate`: task-set validation.
"""

from trialground.verify.reward.model import Reward, RewardComponent
from trialground.verify.verdict import Action, Flag, TestResult, Verdict

__all__ = ["Action", "Flag", "Reward", "RewardComponent", "TestResult", "Verdict"]
