"""Verifiers, the composite reward, hack detection and judges."""

from trialground.verify.base import Flag, Reward, RewardComponent, TestResult, Verdict

__all__ = ["Flag", "Reward", "RewardComponent", "TestResult", "Verdict"]
