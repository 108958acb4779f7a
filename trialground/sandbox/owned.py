"""Whether host-side sandbox state still has an owner, decided by a lock the owner holds.

Workspaces (a directory, often a tmpfs mount) and cgroups outlive a process that is killed with SIGKILL;
the next process that starts a sandbox sweeps them. Whether an entry's owner is alive is decided by an
exclusive `flock` the owner holds for as long as the entry is its own: the kernel drops the lock when the
last process holding that open file dies, so a sweeper that can take the lock knows the owner is gone.
Workspaces are named after a lock file their process holds for its whole life (`workspace.py`: one open
file per process); a cgroup's own directory is locked from making it to removing it. A pid in a name
decides nothing: a process in another pid namespace has a pid this one does not see (its entries would be
swept while it uses them), and a dead owner's pid can be reused (its entries would never be swept).

A lock is made and taken under a shared lock on a guard, and sweeping holds the guard exclusively, so a
sweeper never sees a lock in the moment between its making and its taking. A child forked without `exec`
shares its parent's open locks: an entry is swept only when every process holding it is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

_OPEN = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW


def hold(path: Path, *, create: bool = False) -> int:
    """A descriptor holding the exclusive lock on `path` (a file made here when `create`, else an existing
    file or directory); the entry is owned for as long as it stays open."""
    flags = (os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW) if create else _OPEN
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def abandoned(path: Path) -> int | None:
    """A descriptor holding `path`'s lock when no live process holds it (its owner is gone), else None;
    None too when `path` cannot be opened (it went away)."""
    try:
        return hold(path)
    except OSError:  # BlockingIOError: another process holds it
        return None


@contextlib.contextmanager
def guard(path: Path, *, sweeping: bool) -> Iterator[None]:
    """Hold the guard file or directory `path`: shared while making an entry and taking its lock,
    exclusive while sweeping (a file is made where none is)."""
    if path.is_dir():
        fd = os.open(path, _OPEN | os.O_DIRECTORY)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if sweeping else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
