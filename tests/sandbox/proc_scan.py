"""Finding host processes by their command line, for tests that check what a sandbox left behind."""

from __future__ import annotations

import os
from pathlib import Path


def processes_with(*markers: str) -> list[int]:
    """Live processes whose command line contains one of `markers` (a zombie has no command line)."""
    wanted = [m.encode() for m in markers]
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and any(m in Path(f"/proc/{entry}/cmdline").read_bytes() for m in wanted):
                found.append(int(entry))
        except OSError:
            continue
    return found
