"""Sandboxes: isolated, resource-limited execution with snapshot, restore and fork."""

from trialground.sandbox.base import ExecResult, ExecStatus, Limits, Sandbox, SandboxConfig

__all__ = ["ExecResult", "ExecStatus", "Limits", "Sandbox", "SandboxConfig"]
