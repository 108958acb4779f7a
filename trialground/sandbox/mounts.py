"""Thin wrappers over mount(2)/umount2(2) for workspaces: tmpfs quotas, overlay layers, bind mounts.

Only used when the host runs as root; `CAN_MOUNT` and `OVERLAY_OK` say what works on this machine
(probed once, lazily), and callers fall back to plain directories and copying otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import tempfile
from pathlib import Path

from trialground.errors import SandboxError

MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

CAN_MOUNT = os.geteuid() == 0


def _mount(source: str, target: Path, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"mount {fstype or 'bind'} on {target}: {os.strerror(err)}", kind="mount")


def mount_tmpfs(target: Path, size_mb: int) -> bool:
    """A size- and inode-limited private tmpfs at `target`, shared so later mounts under it propagate into
    sandboxes that bind part of it. False when it cannot be mounted here."""
    inodes = max(1024, size_mb * 256)
    try:
        _mount(
            "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,nr_inodes={inodes},mode=0755"
        )
    except SandboxError:
        return False
    _mount("none", target, None, MS_SHARED, None)
    return True


def mount_overlay(target: Path, lowers: list[Path], upper: Path, work: Path) -> None:
    """Mount an overlay on `target`; `lowers` are listed top (newest) first. nosuid and nodev, like the
    sandbox's own bind of the workspace: the overlay reaches running sandboxes by propagation, with these
    flags and not the bind's."""
    lower = ":".join(str(p) for p in lowers)
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    _mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, options)


def bind(source: Path, target: Path) -> None:
    _mount(str(source), target, None, MS_BIND, None)


def mount_cgroup_v1(target: Path, options: str) -> None:
    """Mount a cgroup v1 hierarchy with `options` (e.g. `none,name=x`) on `target`."""
    _mount("cgroup", target, "cgroup", 0, options)


MS_RDONLY = 1
MS_REMOUNT = 32


def readonly_view(source: Path, target: Path) -> Path:
    """A read-only bind of `source` at `target` (made once, kept): lets an unprivileged sandbox user reach
    a directory whose ancestors it may not traverse (a runtime under /root). Callers serialise calls for
    one `target` across processes (a lock), or two first sandboxes would stack two binds."""
    if stacked := mount_count(target):
        if shows(target, source):
            for _ in range(stacked - 1):  # left by versions without the lock: keep one
                umount(target)
            return target
        # Stale: `source` was removed (and perhaps made again) since this view was bound, so the view
        # still shows the removed directory (a virtualenv rebuilt at the same path, say). Bind it afresh.
        for _ in range(stacked):
            umount(target)
    target.mkdir(parents=True, exist_ok=True)
    _mount(str(source), target, None, MS_BIND, None)
    _mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)
    return target


def shows(view: Path, source: Path) -> bool:
    """Whether the directory seen at `view` is `source` itself (the same inode on the same device)."""
    try:
        seen, real = os.stat(view), os.stat(source)
    except OSError:
        return False
    return (seen.st_dev, seen.st_ino) == (real.st_dev, real.st_ino)


def mount_count(path: Path) -> int:
    """How many mounts sit at `path`, stacked (os.path.ismount misses binds within one filesystem)."""
    wanted = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        # Field 5 is the mount point, with spaces and friends octal-escaped.
        return sum(line.split()[4].encode().decode("unicode_escape") == wanted for line in f)


def detach_deleted(under: Path) -> int:
    """Detach the binds directly under `under` whose source directory was removed (the kernel lists their
    root as `<path>//deleted`): kept views of directories that are gone, such as a test's temporary
    directory. Returns how many were detached."""
    prefix = os.path.realpath(under) + "/"
    stale = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            if (
                point.startswith(prefix)
                and "/" not in point[len(prefix) :]
                and fields[3].endswith("//deleted")
            ):
                stale.append(point)
    for point in stale:
        umount(Path(point))
    return len(stale)


def is_mount_point(path: Path) -> bool:
    """Whether something is mounted at `path`."""
    return mount_count(path) > 0


def umount(target: Path) -> None:
    """Detach `target` (lazily: the kernel frees it when its last user is gone)."""
    if _libc.umount2(str(target).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err == errno.EINVAL and not is_mount_point(target):
            return  # already detached (with the mount above it): what was asked for holds
        raise SandboxError(f"umount {target}: {os.strerror(err)}", kind="mount")


@functools.cache
def overlay_works() -> bool:
    """Probe once whether overlayfs on tmpfs mounts here."""
    if not CAN_MOUNT:
        return False
    root = Path(tempfile.mkdtemp(prefix="tg-ovl-probe-"))
    try:
        if not mount_tmpfs(root, 1):
            return False
        try:
            for d in ("l", "u", "w", "m"):
                (root / d).mkdir()
            mount_overlay(root / "m", [root / "l"], root / "u", root / "w")
            umount(root / "m")
            return True
        except SandboxError:
            return False
        finally:
            umount(root)
    finally:
        root.rmdir()
