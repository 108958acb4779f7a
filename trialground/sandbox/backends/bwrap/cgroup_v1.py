"""Per-sandbox cgroup on cgroup v1 (hierarchies `memory`, `pids`, `freezer`): limits, counters, kill-all.

Chosen by `cgroup.py` when the host runs as root and those v1 controllers are mounted under the cgroup
root. The sandbox's processes enter the group before they exec (see `spawn.py`), so nothing in the sandbox
is ever outside it.

Moving a process into a cgroup takes the kernel's global `cgroup_threadgroup_rwsem` for writing, which by
default waits for an RCU grace period (milliseconds to tens of milliseconds per move: most of a fresh
sandbox's overhead). The kernel's `favordynmods` option (Linux >= 6.0) keeps that lock in the mode where
writers do not wait (forks and exits then take a slightly slower shared path). It is a property of any
cgroup hierarchy and acts machine-wide, so the first sandbox of a process mounts our own empty,
controller-less v1 hierarchy with it (`favor_dynamic_moves`) rather than touching the system's mounts; the
mount is kept, like the runtime view. `TRIALGROUND_SANDBOX_FAVORDYNMODS=0` leaves the kernel as it is; on a
kernel without the option nothing changes but the cost."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox import mounts, owned
from trialground.sandbox.backends.bwrap.cgroup_base import GROUP, Cgroup, sweep_groups
from trialground.sandbox.workspace import BASE_DIR, base_dir_lock

CONTROLLERS = ("memory", "pids", "freezer")
DYNMODS_MOUNT = BASE_DIR / "cgroup-favordynmods"
DYNMODS_OPTIONS = "none,name=trialground-favordynmods,favordynmods"


def usable(root: Path) -> str:
    """Why v1 groups cannot be made under `root` ("" when they can)."""
    if os.geteuid() != 0:
        return "cgroup v1 needs root"
    missing = [c for c in CONTROLLERS if not (root / c / "cgroup.procs").exists()]
    return f"cgroup v1 controllers not mounted under {root}: {', '.join(missing)}" if missing else ""


class CgroupV1(Cgroup):
    """One cgroup per sandbox in each v1 controller hierarchy."""

    version = 1

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.dirs = {c: root / c / GROUP / name for c in CONTROLLERS}
        self._limits: tuple[int, int] | None = None

    @classmethod
    def make(cls, root: Path, name: str) -> CgroupV1 | None:
        """The group `<our pid>.<name>`, its lock held (`owned`); None when it cannot be made."""
        _sweep_stale(root)
        favor_dynamic_moves()
        group = cls(root, cls.name_for(name))
        try:
            group.dirs["pids"].parent.mkdir(parents=True, exist_ok=True)
            with owned.guard(group.dirs["pids"].parent, sweeping=False):
                for d in group.dirs.values():
                    d.mkdir(parents=True, exist_ok=True)
                group.owner = owned.hold(group.dirs["pids"])
        except OSError:
            group.remove()
            return None
        return group

    @staticmethod
    def own(root: Path) -> list[Path]:
        return sorted((root / "pids" / GROUP).glob(Cgroup.name_for("*")))

    def enforced(self) -> frozenset[str]:
        return frozenset({"memory", "pids", "kill"})

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

    def set_limits(self, memory_bytes: int, pids: int, cpus: float | None = None) -> None:
        """Set the ceilings for the next command (unchanged ones are not rewritten); `cpus` is not
        enforced on v1 (`enforced` says so)."""
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
        self.disown()


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
def _sweep_stale(root: Path) -> None:
    """Once per process: remove the groups of processes that died without closing their sandboxes."""
    sweep_groups(root / "pids" / GROUP, lambda name: CgroupV1(root, name))
