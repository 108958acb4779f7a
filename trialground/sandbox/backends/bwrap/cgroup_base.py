"""What a per-sandbox cgroup offers, whichever hierarchy (v1 or v2) it lives in (see `cgroup.py`)."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from pathlib import Path

from trialground.sandbox import owned

GROUP = "trialground"  # the directory our groups live in (v1: in each controller's hierarchy)


class Cgroup(abc.ABC):
    """One sandbox's group: its processes, ceilings, counters and kill-all."""

    version: int
    owner = -1  # the descriptor holding the group's lock while we own it (`owned`)

    @staticmethod
    def name_for(sandbox: str) -> str:
        """The group name of this process's sandbox `sandbox` (`<pid>.<sandbox>`)."""
        return f"{os.getpid()}.{sandbox}"

    def disown(self) -> None:
        owned.release(self.owner)
        self.owner = -1

    @abc.abstractmethod
    def enforced(self) -> frozenset[str]:
        """Which of "memory", "pids", "cpu" and "kill" (kill every member at once) this group enforces."""

    @abc.abstractmethod
    def procs_files(self) -> list[str]:
        """The `cgroup.procs` files a process writes its pid to, to join (one per hierarchy)."""

    def add(self, pid: int) -> None:
        """Move process `pid` (not its existing children) into the group."""
        for procs in self.procs_files():
            with open(procs, "w") as f:
                f.write(str(pid))

    @abc.abstractmethod
    def set_limits(self, memory_bytes: int, pids: int, cpus: float | None = None) -> None:
        """Set the ceilings for the next command (`cpus`: CPU bandwidth in cores, None for none)."""

    @abc.abstractmethod
    def counters(self) -> tuple[int, int]:
        """(OOM kills, times the pids limit refused a fork) so far."""

    def start_peak(self) -> None:  # noqa: B027  (a no-op where the kernel cannot measure it)
        """Start measuring the next command's peak memory (where the kernel can)."""

    def peak_bytes(self) -> int:
        """The group's peak memory since `start_peak`; 0 where the kernel does not say."""
        return 0

    @abc.abstractmethod
    def pids(self) -> list[int]:
        """The group's member processes."""

    @abc.abstractmethod
    def kill_all(self) -> None:
        """SIGKILL every member; nothing can fork its way out meanwhile."""

    @abc.abstractmethod
    def remove(self) -> None:
        """Delete the group (its members must be gone: see `kill_all`)."""


def sweep_groups(guard_dir: Path, group_of: Callable[[str], Cgroup]) -> None:
    """Kill and remove the groups in `guard_dir` whose owners are gone: a group's owner holds a lock on the
    group's directory until it removes it (`owned`), taken under a shared lock on `guard_dir`. Groups
    named `<pid>-<name>` (made before owners held locks) are gone with their pid."""
    if not guard_dir.is_dir():
        return
    with owned.guard(guard_dir, sweeping=True):
        for entry in guard_dir.iterdir():
            if not entry.is_dir():
                continue
            pid, dot, _ = entry.name.partition(".")
            if dot and pid.isdigit():
                fd = owned.abandoned(entry)
                if fd is None:
                    continue  # its owner is alive
            else:
                pid = entry.name.split("-")[0]
                if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                    continue
                fd = -1
            group = group_of(entry.name)
            group.owner = fd
            try:
                group.kill_all()
            finally:
                group.remove()
