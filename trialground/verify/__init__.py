"""Verifiers, the composite reward, hack detection and judges."""

from trialground.verify.base import Action, Flag, Reward, RewardComponent, TestResult, Verdict

__all__ = ["Action", "Flag", "Reward", "RewardComponent", "TestResult", "Verdict"]
