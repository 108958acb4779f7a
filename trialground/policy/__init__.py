"""Policies: transformers, vLLM, OpenAI-compatible endpoints, scripted; the bundled tiny model."""

from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.factory import make_policy

__all__ = ["Generation", "Policy", "SamplingParams", "make_policy"]
