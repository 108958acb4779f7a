"""Host-side file access beneath a workspace directory, safe while the sandbox changes it.

The sandbox owns everything under its workspace and may swap any directory for a symlink at any moment,
so the host never resolves a workspace path by name and then uses it (check-then-use). Instead:

- A workspace path is first normalised lexically (`parts`): `/workspace/...` or relative, `..` folded
  away, refused when it would climb above the workspace. No `..` ever reaches the kernel.
- It is then opened by the kernel beneath a descriptor of the workspace directory: `openat2` with
  `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` where the kernel has it (Linux 5.6+),
  otherwise a walk one component at a time, each opened `O_NOFOLLOW | O_DIRECTORY` relative to the
  descriptor of the one before. Either way no symlink is followed anywhere in the path, and the file
  opened is the one beneath the workspace at the moment of the open.
- Parent directories of a write are made with `mkdirat` on the held parent descriptor.
- Reads and writes take regular files only: opened `O_NONBLOCK` (a FIFO, or a lease the sandbox holds,
  cannot stall the open), then `fstat`-checked; a FIFO, socket, device, directory or symlink is a
  `SandboxError` of kind `not_a_file` or `bad_path`. Reads stop at a size cap (kind `too_large`).
- Whole trees (snapshot copies, restores, wipes) are walked iteratively through directory descriptors
  (`copy_tree`, `clear_tree`, `remove_tree`): never by path, never following a symlink, never recursing
  on the Python stack, and holding at most `WINDOW` descriptors whatever the depth (a level closed on
  the way down is reopened through `..` of its child on the way up, and must be the same directory).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox.base import WORKSPACE

READ_LIMIT = 256 << 20
"""Largest file a host-side read returns (bytes); a larger one is a `too_large` error."""

WINDOW = 32
"""Directory descriptors a tree walk holds open at once, whatever the tree's depth."""

_SYS_OPENAT2 = 437  # the same number on every architecture (the syscall postdates the unified table)
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

OPENAT2: bool | None = None
"""Whether `openat2` is used: None = probe on first use; tests set False to exercise the walk."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(rel)),
        ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
    )  # fmt: skip
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def _have_openat2(dir_fd: int) -> bool:
    global OPENAT2
    if OPENAT2 is None:
        try:
            os.close(_openat2(dir_fd, ".", _WALK, 0))
            OPENAT2 = True
        except OSError as exc:
            # ENOSYS: an older kernel; EPERM: a seccomp profile (containers) that refuses it.
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            OPENAT2 = False
    return OPENAT2


# -- paths -----------------------------------------------------------------------------------------------
def parts(path: str) -> tuple[str, ...]:
    """The components of workspace path `path` (relative, or absolute under /workspace), `.` and `..`
    folded; `()` is the workspace itself. Refuses other absolute paths, NUL bytes and climbing out."""
    if "\x00" in path:
        raise SandboxError("path contains a NUL byte", kind="bad_path")
    rel = path
    if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
        rel = path[len(WORKSPACE) :]
    elif path.startswith("/"):
        raise SandboxError(f"path {path!r} is outside {WORKSPACE}", kind="bad_path")
    out: list[str] = []
    for part in rel.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                raise SandboxError(f"path {path!r} escapes the workspace", kind="bad_path")
            out.pop()
        else:
            out.append(part)
    return tuple(out)


def open_root(directory: str | Path) -> int:
    """A descriptor of a host-owned directory (the workspace itself: a path only the host controls)."""
    return os.open(directory, _DIR)


def open_beneath(dir_fd: int, names: tuple[str, ...], flags: int, mode: int = 0) -> int:
    """Open `names` beneath `dir_fd`, following no symlink at any component (ELOOP where one is met).
    `names` comes from `parts` (no `.`, `..` or empty names); `()` opens `dir_fd`'s directory again."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not names:
        return os.open(".", flags & ~os.O_CREAT, dir_fd=dir_fd)
    if _have_openat2(dir_fd):
        return _openat2(dir_fd, "/".join(names), flags, mode)
    parent = walk_dirs(dir_fd, names[:-1])
    try:
        return _open_last(parent, names[-1], flags, mode)
    finally:
        if parent != dir_fd:
            os.close(parent)


def walk_dirs(dir_fd: int, names: tuple[str, ...]) -> int:
    """An O_PATH descriptor of directory `names` beneath `dir_fd`, one component at a time (`dir_fd`
    itself when `names` is empty). A symlink or non-directory on the way is ELOOP or ENOTDIR."""
    current = dir_fd
    try:
        for name in names:
            nxt = _open_last(current, name, _WALK, 0)
            if current != dir_fd:
                os.close(current)
            current = nxt
    except BaseException:
        if current != dir_fd:
            os.close(current)
        raise
    return current


def _open_last(dir_fd: int, name: str, flags: int, mode: int) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: report it as the symlink it is.
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


# -- files -----------------------------------------------------------------------------------------------
def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symlink"),
    ):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def _failure(exc: OSError, path: str, verb: str) -> Exception:
    """The error a failed open of workspace path `path` becomes (FileNotFoundError stays one)."""
    code = exc.errno
    if code == errno.ENOENT and verb == "read":
        return FileNotFoundError(errno.ENOENT, "no such file", path)
    if code == errno.ENOENT:  # a parent removed (by the sandbox) while the write made its way down
        return SandboxError(f"cannot {verb} {path!r}: a parent directory vanished", kind=verb)
    if code == errno.ELOOP:
        return SandboxError(f"cannot {verb} {path!r}: it goes through a symlink", kind="bad_path")
    if code == errno.EXDEV:
        return SandboxError(f"path {path!r} escapes the workspace", kind="bad_path")
    if code == errno.ENOTDIR:
        return SandboxError(f"cannot {verb} {path!r}: a parent is not a directory", kind="bad_path")
    if code == errno.EISDIR:
        return SandboxError(f"cannot {verb} {path!r}: it is a directory", kind="not_a_file")
    if code in (errno.ENXIO, errno.ENODEV):
        return SandboxError(f"cannot {verb} {path!r}: not a regular file", kind="not_a_file")
    if code == errno.EWOULDBLOCK:
        return SandboxError(f"cannot {verb} {path!r}: held busy by a process in the sandbox", kind=verb)
    return SandboxError(f"cannot {verb} {path!r}: {exc.strerror}", kind=verb)


def _regular(fd: int, path: str, verb: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise SandboxError(
            f"cannot {verb} {path!r}: it is {_kind(st.st_mode)}, not a regular file", kind="not_a_file"
        )
    return st


def read_limit(limit: int | None) -> int:
    """The cap of one read: `limit` when given (a positive number of bytes), never over `READ_LIMIT`."""
    if limit is None:
        return READ_LIMIT
    if limit < 0:
        raise SandboxError(f"a read limit of {limit} bytes", kind="read")
    return min(limit, READ_LIMIT)


def read_file(root: str | Path, path: str, limit: int = READ_LIMIT) -> bytes:
    """The bytes of regular file `path` beneath directory `root`, at most `limit` of them. Raises
    FileNotFoundError when it does not exist, SandboxError for anything else that is wrong."""
    names = parts(path)
    if not names:
        raise SandboxError(f"cannot read {path!r}: it is the workspace directory", kind="not_a_file")
    root_fd = open_root(root)
    try:
        fd = open_beneath(root_fd, names, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise _failure(exc, path, "read") from None
    finally:
        os.close(root_fd)
    try:
        st = _regular(fd, path, "read")
        if st.st_size > limit:
            raise _too_large(path, st.st_size, limit)
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise _too_large(path, total, limit)
        return b"".join(chunks)
    except OSError as exc:
        raise SandboxError(f"cannot read {path!r}: {exc.strerror}", kind="read") from None
    finally:
        os.close(fd)


def _too_large(path: str, size: int, limit: int) -> SandboxError:
    return SandboxError(
        f"cannot read {path!r}: {size} bytes or more, over the {limit}-byte cap", kind="too_large"
    )


def write_file(root: str | Path, path: str, data: bytes, uid: int | None = None) -> None:
    """Create or overwrite regular file `path` beneath directory `root`, making missing parents
    (`mkdirat` on held descriptors). New directories and the file are given to `uid` when set."""
    names = parts(path)
    if not names:
        raise SandboxError(f"cannot write {path!r}: it is the workspace directory", kind="bad_path")
    root_fd = open_root(root)
    try:
        parent = make_dirs(root_fd, names[:-1], uid, path)
        try:
            # No O_TRUNC: the file is checked to be a regular one before anything changes.
            flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
            fd = _open_last(parent, names[-1], flags, 0o644)
        except OSError as exc:
            raise _failure(exc, path, "write") from None
        finally:
            if parent != root_fd:
                os.close(parent)
    finally:
        os.close(root_fd)
    try:
        _regular(fd, path, "write")
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if uid is not None:
            os.fchown(fd, uid, uid)
    except OSError as exc:
        raise SandboxError(f"cannot write {path!r}: {exc.strerror}", kind="write") from None
    finally:
        os.close(fd)


def make_dirs(root_fd: int, names: tuple[str, ...], uid: int | None, path: str) -> int:
    """A descriptor of directory `names` beneath `root_fd` (`root_fd` itself for `()`), each missing
    component made with `mkdirat` on its parent's descriptor, reopened without following, and given
    to `uid`."""
    current = root_fd
    try:
        for name in names:
            try:
                nxt = _open_last(current, name, _WALK, 0)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made meanwhile: the open below decides
                    os.mkdir(name, 0o755, dir_fd=current)
                try:
                    nxt = _open_last(current, name, _DIR, 0)
                    if uid is not None:
                        os.fchown(nxt, uid, uid)
                except OSError as exc:
                    raise _failure(exc, path, "write") from None
            except OSError as exc:
                raise _failure(exc, path, "write") from None
            if current != root_fd:
                os.close(current)
            current = nxt
    except BaseException:
        if current != root_fd:
            os.close(current)
        raise
    return current


# -- trees -----------------------------------------------------------------------------------------------
@dataclass
class _Level:
    """One directory of a walk: its descriptors (None while closed), identities and entries left."""

    fds: list[int | None]
    ids: list[tuple[int, int]]
    names: list[str]
    name: str = ""
    meta: os.stat_result | None = None
    extra: dict[str, object] = field(default_factory=dict)


class _Walk:
    """A depth-first descent over one or more parallel trees (source and copy) by descriptors only."""

    def __init__(self, fds: list[int]) -> None:
        self.levels = [_Level(list(fds), [_ident(fd) for fd in fds], sorted(os.listdir(fds[0])))]

    def push(self, fds: list[int], name: str, meta: os.stat_result | None = None) -> None:
        self.levels.append(
            _Level(list(fds), [_ident(fd) for fd in fds], sorted(os.listdir(fds[0])), name, meta)
        )
        if len(self.levels) > WINDOW + 1:  # the root level always stays open
            old = self.levels[-WINDOW - 1]
            for i, fd in enumerate(old.fds):
                if fd is not None:
                    os.close(fd)
                    old.fds[i] = None

    def top(self) -> _Level:
        return self.levels[-1]

    def pop(self, finish: Callable[[_Level, _Level], None]) -> None:
        """Leave the top directory: reopen its parent if closed, call `finish(child, parent)`, close it."""
        child = self.levels.pop()
        parent = self.levels[-1]
        try:
            for i, fd in enumerate(parent.fds):
                if fd is None:
                    child_fd = child.fds[i]
                    assert child_fd is not None
                    up = os.open("..", _DIR, dir_fd=child_fd)
                    parent.fds[i] = up
                    if _ident(up) != parent.ids[i]:
                        raise SandboxError("a directory moved during a tree walk", kind="tree_changed")
            finish(child, parent)
        finally:
            for fd in child.fds:
                if fd is not None:
                    os.close(fd)

    def close(self) -> None:
        for level in self.levels[1:]:
            for fd in level.fds:
                if fd is not None:
                    os.close(fd)
        self.levels = self.levels[:1]


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _fd(level: _Level, i: int = 0) -> int:
    fd = level.fds[i]
    assert fd is not None  # the top level's descriptors are always open
    return fd


def clear_tree(dir_fd: int, *, ignore_errors: bool = False) -> None:
    """Delete everything beneath directory `dir_fd` (which stays), following no symlink."""
    walk = _Walk([dir_fd])
    try:
        while True:
            level = walk.top()
            if not level.names:
                if len(walk.levels) == 1:
                    return
                walk.pop(
                    lambda child, parent: _quiet(ignore_errors, os.rmdir, child.name, dir_fd=_fd(parent))
                )
                continue
            name = level.names.pop()
            fd = _fd(level)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(name, dir_fd=fd)
                    continue
                child = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError:
                if ignore_errors:
                    continue
                raise
            try:
                walk.push([child], name)
            except BaseException:
                os.close(child)
                raise
    finally:
        walk.close()


def _quiet(ignore: bool, fn: Callable[..., object], *args: object, **kwargs: object) -> None:
    try:
        fn(*args, **kwargs)
    except OSError:
        if not ignore:
            raise


def remove_tree(path: str | Path, *, ignore_errors: bool = False) -> None:
    """Delete `path` and everything beneath it (a symlink or file there is just unlinked)."""
    path = Path(path)
    try:
        parent = os.open(path.parent, _DIR)
    except OSError:
        if ignore_errors:
            return
        raise
    try:
        try:
            fd = os.open(path.name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError:  # not a directory (or a symlink to one): the name alone goes
            _quiet(ignore_errors, os.unlink, path.name, dir_fd=parent)
            return
        try:
            clear_tree(fd, ignore_errors=ignore_errors)
        finally:
            os.close(fd)
        _quiet(ignore_errors, os.rmdir, path.name, dir_fd=parent)
    finally:
        os.close(parent)


def copy_tree(src_fd: int, dst_fd: int) -> None:
    """Copy everything beneath directory `src_fd` into the empty directory `dst_fd`, then the source
    directory's mode, times and (as root) owner onto it. Regular files, directories, symlinks (as
    symlinks) and FIFOs are copied with mode, times and owner; sockets and device nodes are skipped (they
    mean nothing without the process or privilege that made them). Follows no symlink."""
    chown = os.geteuid() == 0
    walk = _Walk([src_fd, dst_fd])
    try:
        while True:
            level = walk.top()
            if not level.names:
                if len(walk.levels) == 1:
                    _set_meta(dst_fd, os.fstat(src_fd), chown)
                    return
                walk.pop(lambda child, parent: _set_meta(_fd(child, 1), child.meta, chown))
                continue
            name = level.names.pop()
            src, dst = _fd(level, 0), _fd(level, 1)
            try:
                st = os.stat(name, dir_fd=src, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone meanwhile
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _DIR, dir_fd=src)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # gone, or swapped for a file or symlink, meanwhile: not part of the copy
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        continue
                    raise
                try:
                    os.mkdir(name, 0o700, dir_fd=dst)
                    made = os.open(name, _DIR, dir_fd=dst)
                except BaseException:
                    os.close(sub)
                    raise
                try:
                    walk.push([sub, made], name, os.fstat(sub))
                except BaseException:
                    os.close(sub)
                    os.close(made)
                    raise
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
                if chown:
                    os.chown(name, st.st_uid, st.st_gid, dir_fd=dst, follow_symlinks=False)
                os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst, follow_symlinks=False)
            elif stat.S_ISREG(st.st_mode):
                _copy_file(src, dst, name, chown)
            elif stat.S_ISFIFO(st.st_mode):
                os.mkfifo(name, 0o600, dir_fd=dst)
                fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst)
                try:
                    _set_meta(fd, st, chown)
                finally:
                    os.close(fd)
    finally:
        walk.close()


def _copy_file(src: int, dst: int, name: str, chown: bool) -> None:
    try:
        fd_in = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(fd_in)
        if not stat.S_ISREG(st.st_mode):
            return  # swapped for something else meanwhile: not part of the copy
        fd_out = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst
        )
        try:
            while os.sendfile(fd_out, fd_in, None, 1 << 30):
                pass
            _set_meta(fd_out, st, chown)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _set_meta(fd: int, st: os.stat_result | None, chown: bool) -> None:
    """Owner (as root), then mode (a chown clears set-id bits), then times, from `st` onto `fd`."""
    assert st is not None
    if chown:
        os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, stat.S_IMODE(st.st_mode))
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
