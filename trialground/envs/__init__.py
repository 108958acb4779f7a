"""Environments: single-turn completion and multi-turn tool use."""

from trialground.envs.base import Environment, Observation

__all__ = ["Environment", "Observation"]
