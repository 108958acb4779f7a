"""Per-sandbox cgroup on cgroup v2 (the unified hierarchy): `memory.max`, `memory.swap.max`, `pids.max`,
`cpu.max`, OOM kills from `memory.events`, refused forks from `pids.events`, `memory.peak`, and kill-all
through `cgroup.kill` (Linux >= 5.14; else freeze, kill, thaw).

Groups live in a *base* directory whose `cgroup.subtree_control` enables the controllers for them
(`cgroup.py` picks it: a configured one, a delegated parent of our own cgroup, or, as root, the
hierarchy's root). v2 does not let a group that has member processes hand controllers to children, which is
why the base holds no process of ours. A controller the base cannot have (bound to a v1 hierarchy, not
delegated) leaves its limit unenforced, and `enforced` says so: the caller warns and falls back.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from pathlib import Path

from trialground.sandbox import owned
from trialground.sandbox.backends.bwrap.cgroup_base import Cgroup, sweep_groups

WANTED = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def controllers(directory: Path) -> set[str]:
    """The controllers available in `directory` (its `cgroup.controllers`); empty when unreadable."""
    try:
        return set((directory / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def enable(base: Path) -> set[str]:
    """Enable the wanted controllers for `base`'s children (each alone: one refused must not stop the
    others); the set now enabled there."""
    control = base / "cgroup.subtree_control"
    for name in sorted(controllers(base) & set(WANTED)):
        with contextlib.suppress(OSError):
            control.write_text(f"+{name}")
    try:
        return set(control.read_text().split())
    except OSError:
        return set()


class CgroupV2(Cgroup):
    """One sandbox's group in the unified hierarchy, under `base`."""

    version = 2

    def __init__(self, base: Path, name: str) -> None:
        self.base = base
        self.dir = base / name
        self._controllers: set[str] = set()
        self._limits: tuple[int, int, float | None] | None = None
        self._peak_fd = -1

    @classmethod
    def make(cls, base: Path, name: str) -> CgroupV2 | None:
        """The group `<our pid>.<name>` under `base`, its lock held (`owned`); None when it cannot be made."""
        _sweep_stale(base)
        enable(base)
        group = cls(base, cls.name_for(name))
        try:
            with owned.guard(base, sweeping=False):
                group.dir.mkdir()
                try:
                    group.owner = owned.hold(group.dir)
                except OSError:
                    group.remove()
                    raise
        except OSError:
            return None
        group._controllers = controllers(group.dir)
        return group

    @staticmethod
    def own(base: Path) -> list[Path]:
        return sorted(base.glob(Cgroup.name_for("*")))

    def enforced(self) -> frozenset[str]:
        found: set[str] = {c for c in ("memory", "pids", "cpu") if c in self._controllers}
        if (self.dir / "cgroup.kill").exists() or (self.dir / "cgroup.freeze").exists():
            found.add("kill")
        return frozenset(found)

    def procs_files(self) -> list[str]:
        return [str(self.dir / "cgroup.procs")]

    def _write(self, name: str, value: str) -> None:
        (self.dir / name).write_text(value)

    def _read(self, name: str) -> str:
        try:
            return (self.dir / name).read_text()
        except OSError:
            return ""

    def set_limits(self, memory_bytes: int, pids: int, cpus: float | None = None) -> None:
        if self._limits == (memory_bytes, pids, cpus):
            return
        if "memory" in self._controllers:
            self._write("memory.max", str(memory_bytes))
            if (self.dir / "memory.swap.max").exists():  # no swap: memory.max is the whole ceiling
                self._write("memory.swap.max", "0")
        if "pids" in self._controllers:
            self._write("pids.max", str(pids))
        if "cpu" in self._controllers:
            quota = "max" if cpus is None else str(max(1000, int(cpus * CPU_PERIOD_US)))
            self._write("cpu.max", f"{quota} {CPU_PERIOD_US}")
        self._limits = (memory_bytes, pids, cpus)

    def counters(self) -> tuple[int, int]:
        return _field(self._read("memory.events"), "oom_kill"), _field(self._read("pids.events"), "max")

    def start_peak(self) -> None:
        """memory.peak, opened and reset for this reader (Linux >= 6.12 resets per open file); on older
        kernels the reset fails and the peak is the group's lifetime one, which is not reported."""
        if self._peak_fd >= 0:
            os.close(self._peak_fd)
            self._peak_fd = -1
        if "memory" not in self._controllers:
            return
        try:
            fd = os.open(self.dir / "memory.peak", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            os.write(fd, b"reset\n")
        except OSError:
            os.close(fd)
            return
        self._peak_fd = fd

    def peak_bytes(self) -> int:
        if self._peak_fd < 0:
            return 0
        try:
            return int(os.pread(self._peak_fd, 64, 0).split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def pids(self) -> list[int]:
        return [int(p) for p in self._read("cgroup.procs").split()]

    def kill_all(self) -> None:
        try:
            self._write("cgroup.kill", "1")  # the kernel kills every member, forks in flight included
            killed = True
        except OSError:
            killed = False
        frozen = False
        if not killed:
            with contextlib.suppress(OSError):
                self._write("cgroup.freeze", "1")
                frozen = True
        for _ in range(50):
            members = self.pids()
            if not members:
                break
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if frozen:  # killed members only die once thawed
                with contextlib.suppress(OSError):
                    self._write("cgroup.freeze", "0")
                frozen = False
            time.sleep(0.002)
        if frozen:
            with contextlib.suppress(OSError):
                self._write("cgroup.freeze", "0")

    def remove(self) -> None:
        if self._peak_fd >= 0:
            os.close(self._peak_fd)
            self._peak_fd = -1
        for _ in range(100):
            try:
                self.dir.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.005)  # the last members are still being reaped
        self.disown()


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@functools.cache
def _sweep_stale(base: Path) -> None:
    """Once per process and base: remove the groups of processes that died without closing them."""
    sweep_groups(base, lambda name: CgroupV2(base, name))
