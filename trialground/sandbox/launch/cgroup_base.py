"""What a per-sandbox cgroup offers, whichever hierarchy (v1 or v2) it lives in (see `cgroup.py`)."""

from __future__ import annotations

import abc

GROUP = "trialground"  # the directory our groups live in (v1: in each controller's hierarchy)


class Cgroup(abc.ABC):
    """One sandbox's group: its processes, ceilings, counters and kill-all."""

    version: int

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
