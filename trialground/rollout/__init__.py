"""The agent loop and token-exact trajectories."""

from trialground.rollout.trajectory import Trajectory, Turn

__all__ = ["Trajectory", "Turn"]
