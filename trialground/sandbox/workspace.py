"""The host side of a sandbox's workspace: a private directory, safe file access, snapshot layers.

Layout of one workspace (`root` is a size-limited tmpfs when the host runs as root, which is the disk and
inode quota; a plain temp directory otherwise):

    root/ws        what the sandbox sees at /workspace (a plain directory, or an overlay mounted on it)
    root/l/N       frozen overlay layers (lower directories), never modified once frozen
    root/u/N, w/N  the current overlay upper and work directories

Host-side `write`/`read` and the tree copies of snapshots go through `beneath`: resolved by the kernel
beneath a descriptor of `root/ws`, never through a symlink, regular files only. The overlay at `root/ws`
sits on a shared mount (restores reach running sandboxes by propagation), so a root process elsewhere that
copies the host's mount namespace without making it private and then unmounts there would detach it
here too: every read, write and snapshot first checks that `root/ws` is still the overlay mounted last, and
says so (`SandboxError` kind `workspace_lost`) instead of reading the empty directory beneath as "no files".
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox import beneath, mounts, owned
from trialground.sandbox.base import text_bytes

BASE_DIR = Path(os.environ.get("TRIALGROUND_SANDBOX_DIR", tempfile.gettempdir())) / "trialground-sandboxes"
# A workspace is BASE_DIR/ws.<owner>.<random>, where <owner> (`<pid>.<random>`) names the lock file
# BASE_DIR/owner.<owner> that its process holds for as long as it lives (`owned`, `sweep_stale`).
PREFIX = "ws."
OWNER_PREFIX = "owner."
SWEEP_GUARD = ".sweep"


class Workspace:
    """A private workspace directory owned by `uid` (the sandbox's host uid; None = ours)."""

    def __init__(self, disk_mb: int, uid: int | None, *, overlay: bool) -> None:
        _check_base_dir()
        sweep_stale()
        self.root = Path(tempfile.mkdtemp(prefix=own_prefix(), dir=BASE_DIR))
        self.uid, self.disk_mb = uid, disk_mb
        self.tmpfs = mounts.CAN_MOUNT and mounts.mount_tmpfs(self.root, disk_mb)
        self.overlay = overlay and self.tmpfs and mounts.overlay_works()
        self.ws = self.root / "ws"
        self.ws.mkdir()
        self._chown(self.ws)
        self.layers: list[Path] = []  # frozen lower directories, oldest first
        self.mounted = False
        self._device = 0  # st_dev of the overlay at `ws` while mounted (`check_view`)
        self._bound: dict[Path, int] = {}  # a fork's binds of its parent's layers: their st_dev
        self._gen = 0
        self._snapshots: dict[str, tuple[Path, ...]] = {}

    def _chown(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.uid, follow_symlinks=False)

    # -- files -------------------------------------------------------------------------------------------
    def write(self, path: str, data: bytes | str) -> None:
        """Create or overwrite a regular file, making parents; race-free against the sandbox (`beneath`)."""
        self.check_view()
        beneath.write_file(self.ws, path, text_bytes(data), self.uid)

    def read(self, path: str, limit: int = beneath.READ_LIMIT) -> bytes:
        """A regular file's bytes (at most `limit`); FileNotFoundError when missing (`beneath`)."""
        self.check_view()
        return beneath.read_file(self.ws, path, limit)

    def check_view(self) -> None:
        """SandboxError (kind `workspace_lost`) when the overlay mounted at `ws` is no longer there: the
        host would see the empty directory beneath it, and every file of the workspace as missing."""
        why = self.view_lost()
        if why is not None:
            raise SandboxError(
                f"the host's view of this workspace is gone ({why}): its overlay at {self.ws} was unmounted "
                "from outside (a process that copied the host's mount namespace without making it private "
                "and unmounted in it); restore the sandbox to mount it again",
                kind="workspace_lost",
            )

    def view_lost(self) -> str | None:
        """Why the overlay last mounted at `ws` is not what `ws` shows now; None while it is (or when no
        overlay is mounted: a plain directory cannot be unmounted)."""
        if not self.mounted:
            return None
        try:
            device = os.stat(self.ws).st_dev
        except OSError as exc:
            return exc.strerror or "cannot stat it"
        return None if device == self._device else "another filesystem is there now"

    # -- snapshots ---------------------------------------------------------------------------------------
    def snapshot(self, name: str | None = None) -> str:
        """Freeze the current state (as `name`, else a new id); with overlays O(1) in the number of files."""
        # With the view lost the sandbox may still write to the upper layer this would freeze (its own copy
        # of the overlay): a frozen layer must never change, so no snapshot is taken then.
        self.check_view()
        self._gen += 1
        sid = name or f"s{self._gen}"
        if not self.overlay:
            copy = self.root / "c" / sid
            copy.parent.mkdir(exist_ok=True)
            copy.mkdir()
            _copy_tree(self.ws, copy)
            self._snapshots[sid] = (copy,)
            return sid
        layer = self.root / "l" / str(self._gen)
        layer.parent.mkdir(exist_ok=True)
        if self.mounted:
            mounts.umount(self.ws)
            os.rename(self.root / "u" / str(self._upper_gen), layer)
        else:
            layer.mkdir()
            self._chown(layer)
            for entry in os.listdir(self.ws):  # the plain start directory becomes the first layer
                os.rename(self.ws / entry, layer / entry)
        self.layers.append(layer)
        self._snapshots[sid] = tuple(self.layers)
        self._mount(self.layers)
        return sid

    def restore(self, sid: str) -> None:
        """Make `ws` byte-identical to snapshot `sid` (callers first stop every process using it)."""
        if sid not in self._snapshots:
            raise SandboxError(f"unknown snapshot {sid!r}", kind="bad_snapshot")
        if not self.overlay:
            _clear(self.ws)  # the directory itself stays: a running sandbox has it mounted
            _copy_tree(self._snapshots[sid][0], self.ws)
            return
        mounts.umount(self.ws)
        old = self._upper_gen
        self.layers = list(self._snapshots[sid])
        self._mount(self.layers)
        # The discarded upper layer still counts against the quota: free it, off the restore's clock.
        garbage = [self.root / "u" / str(old), self.root / "w" / str(old)]
        threading.Thread(target=_remove_all, args=(garbage,), daemon=True).start()

    def renew(self, sid: str) -> None:
        """Move to a new filesystem (a new tmpfs on a root host, else a new directory) holding exactly the
        files of snapshot `sid`, with no snapshot (the caller takes one, `snapshot(sid)`, once the sandbox
        binds the new `ws`): the start of a new occupant (`Sandbox.hand_over`). The old filesystem's
        counters go with it: the next inode number, which an occupant sets by making files, would tell the
        next what it did. Callers first stop every process using `ws`."""
        self.restore(sid)
        fresh = Workspace(self.disk_mb, self.uid, overlay=self.overlay)
        try:
            _copy_tree(self.ws, fresh.ws)
        except BaseException:
            fresh.close()
            raise
        gen, old = self._gen, dict(vars(self))
        vars(self).update(vars(fresh))
        vars(fresh).update(old)
        self._gen = max(gen, self._gen)  # ids and layer names never repeat one given out before
        fresh.close()  # the old filesystem: lazily, while a fork still binds its layers

    def _mount(self, layers: list[Path]) -> None:
        for layer, device in self._bound.items():  # a parent's layer unbound from outside: files missing
            if layer in layers and os.stat(layer).st_dev != device:
                raise SandboxError(
                    f"layer {layer} of this fork was unmounted from outside; the workspace cannot be mounted",
                    kind="workspace_lost",
                )
        self._upper_gen = self._gen_next()
        upper, work = self.root / "u" / str(self._upper_gen), self.root / "w" / str(self._upper_gen)
        for d in (upper, work):
            d.mkdir(parents=True)
        self._chown(upper)
        mounts.mount_overlay(self.ws, list(reversed(layers)), upper, work)
        self.mounted = True
        self._device = os.stat(self.ws).st_dev

    def _gen_next(self) -> int:
        self._gen += 1
        return self._gen

    def seed_from(self, other: Workspace) -> None:
        """Start as a copy of `other`'s current state (fork): shares its frozen layers when overlaying."""
        if self.overlay and other.overlay:
            sid = other.snapshot()
            # Bind the parent's frozen layers into our own tree: they stay reachable (and alive) by path
            # after the parent closes, and are never written, so sharing them is safe.
            self.layers = []
            for i, layer in enumerate(other._snapshots[sid]):
                mine = self.root / "l" / f"p{i}"
                mine.mkdir(parents=True)
                mounts.bind(layer, mine)
                self._bound[mine] = os.stat(mine).st_dev
                self.layers.append(mine)
            self._mount(self.layers)
        else:
            _clear(self.ws)
            _copy_tree(other.ws, self.ws)

    def close(self) -> None:
        if self.mounted:
            mounts.umount(self.ws)
        if self.tmpfs:
            # Lazy: forks may still reference our layers; the kernel frees the tmpfs with the last user.
            mounts.umount(self.root)
            self.root.rmdir()
        else:
            beneath.remove_tree(self.root, ignore_errors=True)


def _check_base_dir() -> None:
    """The parent of all workspaces must be ours and not writable by others (it sits in /tmp)."""
    BASE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(BASE_DIR)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"{BASE_DIR} is not a directory owned by us and closed to others; remove it or set "
            "TRIALGROUND_SANDBOX_DIR elsewhere",
            kind="unsafe_base_dir",
        )


@contextlib.contextmanager
def base_dir_lock() -> Iterator[None]:
    """Held while making the host-side state that all processes share (views, the cgroup mount), so two
    processes starting their first sandboxes at once make it once."""
    _check_base_dir()
    fd = os.open(BASE_DIR / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_owner: tuple[int, str, int] | None = None  # this process's (pid, owner token, descriptor holding its lock)
_owner_mutex = threading.Lock()


def _after_fork() -> None:
    global _owner_mutex
    _owner_mutex = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork)


def _owner_token() -> str:
    """This process's owner token; its lock file is made (under the sweep guard, so no sweep sees it
    unlocked) and held on first use, and a forked child makes its own."""
    global _owner
    with _owner_mutex:
        if _owner is None or _owner[0] != os.getpid():
            _check_base_dir()
            token = f"{os.getpid()}.{secrets.token_hex(4)}"
            with owned.guard(BASE_DIR / SWEEP_GUARD, sweeping=False):
                _owner = (os.getpid(), token, owned.hold(BASE_DIR / f"{OWNER_PREFIX}{token}", create=True))
        return _owner[1]


def own_prefix() -> str:
    """The name prefix of this process's workspaces under BASE_DIR."""
    return f"{PREFIX}{_owner_token()}."


def owner_lock(root: Path) -> Path:
    """The lock file whose holder owns the workspace at `root`."""
    return BASE_DIR / f"{OWNER_PREFIX}{root.name.removeprefix(PREFIX).rpartition('.')[0]}"


@functools.cache
def sweep_stale() -> None:
    """Once per process: free the workspaces whose owners died without closing them (SIGKILL). An owner
    holds its lock file from before its first workspace until it exits (`owned`): the workspaces of a
    lock that can be taken, or that is missing (the sweep that found its owner gone was cut short), are
    freed, then the lock file. Under the sweep guard, so no owner's lock is being made meanwhile."""
    with owned.guard(BASE_DIR / SWEEP_GUARD, sweeping=True):
        by_lock: dict[Path, list[Path]] = {}
        for entry in BASE_DIR.glob(f"{PREFIX}*"):
            by_lock.setdefault(owner_lock(entry), []).append(entry)
        for lock in BASE_DIR.glob(f"{OWNER_PREFIX}*"):
            by_lock.setdefault(lock, [])
        for lock, entries in by_lock.items():
            fd = owned.abandoned(lock) if lock.exists() else -1
            if fd is None:
                continue  # its owner is alive
            try:
                for entry in entries:
                    _free(entry)
                lock.unlink(missing_ok=True)
            finally:
                owned.release(fd)
        # Workspaces named by pid alone (`ws-<pid>-...`, before owners held locks): gone with the pid.
        for entry in BASE_DIR.glob("ws-*-*"):
            pid = entry.name.split("-")[1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                _free(entry)


def _free(entry: Path) -> None:
    for mounted in (entry / "ws", entry):
        if mounts.CAN_MOUNT and mounts.is_mount_point(mounted):
            with contextlib.suppress(SandboxError):
                mounts.umount(mounted)
    beneath.remove_tree(entry, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_all(paths: list[Path]) -> None:
    for path in paths:
        beneath.remove_tree(path, ignore_errors=True)


def _clear(directory: Path) -> None:
    """Empty `directory` (it stays: a running sandbox has it mounted), following no symlink."""
    fd = beneath.open_root(directory)
    try:
        beneath.clear_tree(fd)
    finally:
        os.close(fd)


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy the tree under `src` into the empty directory `dst` (see `beneath.copy_tree`)."""
    src_fd = beneath.open_root(src)
    try:
        dst_fd = beneath.open_root(dst)
        try:
            beneath.copy_tree(src_fd, dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
