"""Policies: transformers, vLLM, OpenAI-compatible endpoints, scripted; the bundled tiny model."""

from trialground.policy.base import Generation, Policy, SamplingParams

__all__ = ["Generation", "Policy", "SamplingParams"]
