"""Helpers for the attack tests."""

from __future__ import annotations

import os
from pathlib import Path

from trialground.sandbox.base import Limits, SandboxConfig

LIMITS = Limits(wall_s=8, cpu_s=8, memory_mb=96, pids=32, disk_mb=16, file_size_mb=64, output_bytes=64 * 1024)
CONFIG = SandboxConfig(limits=LIMITS)


def unenforced(sandbox: object, limit: str) -> bool:
    """Whether `sandbox` reports that this host does not enforce `limit` as documented (its fallback is
    then what a test checks), e.g. "memory" or "pids" without cgroups, "disk" without root."""
    warnings = getattr(sandbox, "limit_warnings", ())
    return any(line.startswith(f"{limit}:") for line in warnings)


ROOT_ONLY_REASON = "needs root: reads the sandbox's processes in /proc, which they keep from other users"


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (seen from the host, across all namespaces)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b"pytest" not in cmdline:
            found.append(int(entry))
    return found


def sandbox_host_pids(sandbox: object) -> list[int]:
    """Host pids of the processes inside `sandbox` (a bwrap-backend sandbox): those of its PID namespace."""
    proc = sandbox._proc  # type: ignore[attr-defined]
    namespace = os.readlink(f"/proc/{proc.pid}/ns/pid")
    if namespace == os.readlink("/proc/self/ns/pid"):  # bubblewrap itself: its child is the PID 1
        namespace = next(os.readlink(f"/proc/{pid}/ns/pid") for pid in _children(proc.pid))
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                found.append(int(entry))
        except OSError:
            continue
    return found


def _children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children]
