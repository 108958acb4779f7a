"""Per-sandbox cgroup (v1 hierarchies `memory`, `pids`, `freezer`): limits, counters, kill-all.

Used when the host runs as root and the v1 controllers are mounted; `Cgroup.create` returns None otherwise
and the caller falls back to rlimits. The sandbox's processes enter the group before they exec (see
`spawn.py`), so nothing in the sandbox is ever outside it.

Moving a process into a cgroup takes the kernel's global `cgroup_threadgroup_rwsem` for writing, which by
default waits for an RCU grace period: 2-35 ms on this 2-core VM, most of a fresh sandbox's overhead. The
kernel's `favordynmods` option (Linux >= 6.0) keeps that lock in the mode where writers do not wait (forks
and exits then take a slightly slower shared path). It is a property of any cgroup hierarchy and acts
machine-wide, so the first sandbox of a process mounts our own empty, controller-less v1 hierarchy with it
(`favor_dynamic_moves`) rather than touching the system's mounts; the mount is kept, like the runtime view.
`TRIALGROUND_SANDBOX_FAVORDYNMODS=0` leaves the kernel as it is; on a kernel without the option nothing
changes but the cost.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox import mounts
from trialground.sandbox.workspace import BASE_DIR, base_dir_lock

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "freezer")
GROUP = "trialground"
DYNMODS_MOUNT = BASE_DIR / "cgroup-favordynmods"
DYNMODS_OPTIONS = "none,name=trialground-favordynmods,favordynmods"


def _available() -> bool:
    return os.geteuid() == 0 and all((ROOT / c / "cgroup.procs").exists() for c in CONTROLLERS)


AVAILABLE = _available()


class Cgroup:
    """One cgroup per sandbox in each v1 controller hierarchy."""

    def __init__(self, name: str) -> None:
        self.dirs = {c: ROOT / c / GROUP / name for c in CONTROLLERS}
        self._limits: tuple[int, int] | None = None

    @classmethod
    def create(cls, name: str) -> Cgroup | None:
        """The group `<our pid>-<name>`; None where cgroups cannot be used."""
        if not AVAILABLE:
            return None
        _sweep_stale()
        favor_dynamic_moves()
        group = cls(f"{os.getpid()}-{name}")
        try:
            for d in group.dirs.values():
                d.mkdir(parents=True, exist_ok=True)
        except OSError:
            group.remove()
            return None
        return group

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def add(self, pid: int) -> None:
        """Move process `pid` (not its existing children) into the group."""
        for procs in self.procs_files():
            with open(procs, "w") as f:
                f.write(str(pid))

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.dirs[controller] / name).write_text(value)

    def _read(self, controller: str, name: str) -> str:
        try:
            return (self.dirs[controller] / name).read_text()
        except OSError:
            return ""

    def set_limits(self, memory_bytes: int, pids: int) -> None:
        """Set the ceilings for the next command (unchanged ones are not rewritten)."""
        if self._limits == (memory_bytes, pids):
            return
        # EBUSY: files the sandbox keeps in memory (its /tmp) already exceed the lower ceiling asked for;
        # the previous ceiling stays, which still bounds the sandbox.
        try:
            self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
            self._limits = (memory_bytes, pids)
        except OSError:
            self._limits = None
        self._write("pids", "pids.max", str(pids))

    def counters(self) -> tuple[int, int]:
        """(OOM kills, times the pids limit refused a fork) so far."""
        oom = 0
        for line in self._read("memory", "memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                oom = int(line.split()[1])
        pids_max = 0
        for line in self._read("pids", "pids.events").splitlines():
            if line.startswith("max "):
                pids_max = int(line.split()[1])
        return oom, pids_max

    def pids(self) -> list[int]:
        return [int(p) for p in self._read("pids", "cgroup.procs").split()]

    def kill_all(self) -> None:
        """Freeze, SIGKILL every member, thaw: nothing can fork its way out in between."""
        frozen = False
        try:
            self._write("freezer", "freezer.state", "FROZEN")
            frozen = True
        except OSError:
            pass
        for _ in range(50):
            members = self.pids()
            if not members:
                break
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if frozen:
                self._write("freezer", "freezer.state", "THAWED")
                frozen = False
            time.sleep(0.002)
        if frozen:
            self._write("freezer", "freezer.state", "THAWED")

    def remove(self) -> None:
        """Delete the group (its members must be gone: see `kill_all`)."""
        for d in self.dirs.values():
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)  # the last members are still being reaped


@functools.cache
def favor_dynamic_moves() -> bool:
    """Once per process: make sure a hierarchy with `favordynmods` is mounted (see the module docstring);
    whether one is."""
    if os.environ.get("TRIALGROUND_SANDBOX_FAVORDYNMODS", "1") == "0" or not mounts.CAN_MOUNT:
        return False
    with base_dir_lock():
        if mounts.is_mount_point(DYNMODS_MOUNT):
            return True
        DYNMODS_MOUNT.mkdir(mode=0o755, exist_ok=True)
        try:
            mounts.mount_cgroup_v1(DYNMODS_MOUNT, DYNMODS_OPTIONS)
        except SandboxError:  # a kernel before 6.0 (EINVAL): moves just cost what they cost
            return False
    return True


@functools.cache
def _sweep_stale() -> None:
    """Once per process: remove the groups of processes that died without closing their sandboxes."""
    for entry in (ROOT / "pids" / GROUP).glob("*-*"):
        pid = entry.name.split("-")[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        group = Cgroup(entry.name.split("-", 1)[1])
        group.dirs = {c: ROOT / c / GROUP / entry.name for c in CONTROLLERS}
        group.kill_all()
        group.remove()
