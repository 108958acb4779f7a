"""Helpers for the attack tests."""

from __future__ import annotations

import os
from pathlib import Path

from trialground.sandbox.base import Limits, SandboxConfig

LIMITS = Limits(wall_s=8, cpu_s=8, memory_mb=96, pids=32, disk_mb=16, file_size_mb=64, output_bytes=64 * 1024)
CONFIG = SandboxConfig(limits=LIMITS)


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
