"""Sandboxes: isolated, resource-limited execution with snapshot, restore and fork."""

from trialground.sandbox.base import ExecResult, ExecStatus, Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import SyncSandbox, open_sandbox

__all__ = ["ExecResult", "ExecStatus", "Limits", "Sandbox", "SandboxConfig", "SyncSandbox", "open_sandbox"]
