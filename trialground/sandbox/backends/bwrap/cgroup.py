"""Per-sandbox cgroups: which hierarchy this host offers, each sandbox's group, and a loud warning for every
limit that cannot be enforced here.

The choice is made once per process (`hierarchy()`):

- `TRIALGROUND_CGROUP`: `auto` (default), `v1`, `v2` or `off`.
- `TRIALGROUND_CGROUP_ROOT`: for v1, the directory the controller hierarchies are mounted in (default
  /sys/fs/cgroup); for v2, the directory of a cgroup2 hierarchy to make the groups in (its
  `cgroup.subtree_control` gets `+memory +pids +cpu`; it must hold no process, as v2 requires of a group
  that hands controllers to children).
- auto: cgroup v1 (`cgroup_v1.py`) as root when `memory`, `pids` and `freezer` are mounted there; else
  cgroup v2 (`cgroup_v2.py`), in the first of: the parent of our own cgroup when it is delegated to us (we
  may write its `cgroup.procs` and `cgroup.subtree_control`: systemd's `Delegate=yes` with us in a leaf),
  or, as root, the hierarchy's root. Groups go in a `trialground` directory there.

Whatever a group cannot enforce falls back (memory: RLIMIT_AS, the address space rather than resident
memory, and an OOM is then not reported as memory_limit; pids: RLIMIT_NPROC, counted per uid in the
sandbox's own user namespace) and is reported: logged once as a warning, and listed in every
`ExecResult.limit_warnings` of the sandbox.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from trialground.sandbox.backends.bwrap import cgroup_v1, cgroup_v2
from trialground.sandbox.backends.bwrap.cgroup_base import GROUP, Cgroup

__all__ = ["GROUP", "ROOT", "Cgroup", "Hierarchy", "create", "hierarchy", "limit_warnings", "own_groups"]

log = logging.getLogger(__name__)
ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Hierarchy:
    """Where this process makes sandbox groups: `version` 1 (under `root`), 2 (in `root`, a base
    directory), or 0 (none); `reason` says why a better one was not used."""

    version: int
    root: Path | None
    reason: str = ""
    notes: tuple[str, ...] = field(default=())


def _mountinfo() -> list[tuple[str, str, str]]:
    """(mount root, mount point, file system type) of every mount we see."""
    found: list[tuple[str, str, str]] = []
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        parts = left.split()
        if len(parts) >= 5 and right:
            found.append((parts[3], parts[4], right.split()[0]))
    return found


def _own_v2_cgroup() -> Path | None:
    """Our own cgroup's directory in a mounted cgroup2 hierarchy (None when none is mounted)."""
    try:
        line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::"))
    except (OSError, StopIteration):
        return None
    path = line[3:]
    for root, point, fstype in _mountinfo():
        if fstype != "cgroup2":
            continue
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return Path(point) / path[len(root) :].lstrip("/")
    return None


def _writable(directory: Path) -> bool:
    return all(os.access(directory / name, os.W_OK) for name in ("cgroup.procs", "cgroup.subtree_control"))


def _v2_base(configured: str | None) -> tuple[Path | None, str]:
    """A prepared base directory for v2 groups, or None and why not."""
    if configured:
        base = Path(configured)
        if not (base / "cgroup.controllers").exists():
            return None, f"TRIALGROUND_CGROUP_ROOT={configured} is not a directory of a cgroup2 hierarchy"
        return _prepare(base, parent=None)
    own = _own_v2_cgroup()
    if own is None:
        return None, "no cgroup2 hierarchy is mounted"
    parent = own.parent
    if own != parent and (parent / "cgroup.controllers").exists() and _writable(parent):
        return _prepare(parent / GROUP, parent=parent)
    point = next(Path(p) for r, p, t in _mountinfo() if t == "cgroup2" and Path(p) in (own, *own.parents))
    if os.geteuid() == 0 and _writable(point):
        return _prepare(point / GROUP, parent=point)
    if own == point:
        return None, f"we are in the root of the cgroup2 hierarchy at {point}, which only root may use"
    return None, f"our cgroup {own} is not delegated to us (its parent is not writable by uid {os.geteuid()})"


def _prepare(base: Path, parent: Path | None) -> tuple[Path | None, str]:
    try:
        if parent is not None:
            cgroup_v2.enable(parent)
            base.mkdir(exist_ok=True)
        cgroup_v2.enable(base)
    except OSError as exc:
        return None, f"cannot make {base}: {exc.strerror}"
    return base, ""


@functools.cache
def hierarchy() -> Hierarchy:
    """The hierarchy this process uses (see the module docstring), chosen once."""
    mode = os.environ.get("TRIALGROUND_CGROUP", "auto")
    configured = os.environ.get("TRIALGROUND_CGROUP_ROOT") or None
    if mode not in ("auto", "v1", "v2", "off"):
        raise ValueError(f"TRIALGROUND_CGROUP={mode!r}: expected auto, v1, v2 or off")
    if mode == "off":
        return Hierarchy(0, None, "TRIALGROUND_CGROUP=off")
    reasons = []
    if mode in ("auto", "v1"):
        root = Path(configured) if configured and mode == "v1" else ROOT
        why = cgroup_v1.usable(root)
        if not why:
            return Hierarchy(1, root)
        reasons.append(why)
    if mode in ("auto", "v2"):
        base, why = _v2_base(configured)
        if base is not None:
            return Hierarchy(2, base, "; ".join(reasons))
        reasons.append(why)
    return Hierarchy(0, None, "; ".join(reasons))


def create(name: str) -> Cgroup | None:
    """A new group for sandbox `name` in this process's hierarchy; None where there is none."""
    h = hierarchy()
    if h.root is None:
        return None
    if h.version == 1:
        return cgroup_v1.CgroupV1.make(h.root, name)
    return cgroup_v2.CgroupV2.make(h.root, name)


def own_groups() -> list[Path]:
    """The groups of this process's sandboxes that exist now (one path per group)."""
    h = hierarchy()
    if h.root is None:
        return []
    return (cgroup_v1.CgroupV1 if h.version == 1 else cgroup_v2.CgroupV2).own(h.root)


FALLBACKS = {
    "memory": "memory: not enforced by a cgroup ({why}); RLIMIT_AS caps the address space instead (not "
    "resident memory), and running out is not reported as memory_limit",
    "pids": "pids: not enforced by a cgroup ({why}); RLIMIT_NPROC counts the sandbox user's processes "
    "instead, and a refused fork is not reported as pids_limit",
    "cpu": "cpus: not enforced ({why}); only the cpu_s time limit applies",
}


def limit_warnings(group: Cgroup | None, *, cpus: bool = False) -> tuple[str, ...]:
    """What `group` (None: no group) leaves unenforced, each line saying what stands in for it; logged as
    a warning the first time each is seen. `cpus`: whether a CPU bandwidth ceiling was asked for."""
    enforced = group.enforced() if group is not None else frozenset()
    h = hierarchy()
    found = []
    for limit in ("memory", "pids", "cpu"):
        if limit in enforced or (limit == "cpu" and not cpus):
            continue
        if group is None:
            why = f"no cgroup: {h.reason or 'the group could not be made'}"
        elif group.version == 1:
            why = "cgroup v1 groups here have no cpu controller"
        else:
            why = f"the cgroup v2 controller {limit!r} is not available in {h.root}"
        found.append(FALLBACKS[limit].format(why=why))
    for line in found:
        warn_once(line)
    return tuple(found)


@functools.cache
def warn_once(line: str) -> None:
    """Log `line` (a limit this host does not enforce) as a warning, once per process."""
    log.warning("sandbox limit %s", line)


def disk_warning(tmpfs: bool) -> tuple[str, ...]:
    """The disk quota is a size-limited tmpfs under the workspace: without one (not root), say so (logged
    the first time, like `limit_warnings`)."""
    if tmpfs:
        return ()
    line = (
        "disk: not enforced (the workspace is a plain directory: its size-limited tmpfs needs root); "
        "file_size_mb still bounds each file"
    )
    warn_once(line)
    return (line,)
