"""Hack detectors: evidence for the monitor, never a verdict by themselves."""
