"""Host files and directories that sandboxes see read-only: the Python runtime and a view of /etc."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
from pathlib import Path

from trialground.sandbox import mounts
from trialground.sandbox.base import WORKSPACE
from trialground.sandbox.workspace import BASE_DIR, base_dir_lock

INNER_UID = 1000
ETC_FILES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "alternatives", "ssl",
    "ca-certificates", "mime.types", "protocols", "services",
)  # fmt: skip
# A networked sandbox's own resolver: the host's resolv.conf may name a loopback resolver, which is not
# reachable from the sandbox's network namespace; slirp4netns relays DNS from 10.0.2.3 (`netns.py`).
NETWORK_ETC_FILES = ("hosts", "gai.conf", "host.conf")
NETWORK_ETC_WRITTEN = (("resolv.conf", "nameserver 10.0.2.3\n"),)
IDENTITY = {
    "passwd": f"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:{INNER_UID}:{INNER_UID}::{WORKSPACE}:/bin/bash\n",
    "group": f"root:x:0:\nsandbox:x:{INNER_UID}:\n",
}


def runtime_source(prefix: str) -> str:
    """Where bubblewrap (running as the unprivileged sandbox uid) can reach the runtime (or another kept
    view's directory) from: a read-only bind kept under the sandbox directory, named by the path's digest.
    Checked on every call (two stats) and bound again when the directory at `prefix` is no longer the one
    bound, as when a virtualenv is rebuilt at the same path: a kept bind would go on showing the removed
    directory, and sandboxes would fail to start."""
    if os.geteuid() != 0 or not mounts.CAN_MOUNT:
        return prefix
    digest = hashlib.sha1(prefix.encode()).hexdigest()[:12]
    target = BASE_DIR / "runtime" / digest
    if prefix in _checked and mounts.shows(target, Path(prefix)):
        return str(target)
    with base_dir_lock():  # the first call of a process looks at the mount table (and mends stacked binds)
        if not _checked:
            mounts.detach_deleted(target.parent)
        mounts.readonly_view(Path(prefix), target)
    _checked.add(prefix)
    return str(target)


_checked: set[str] = set()  # the prefixes whose view this process has made or checked under the lock


@functools.cache
def etc_view(
    names: tuple[str, ...], source: Path = Path("/etc"), written: tuple[tuple[str, str], ...] = ()
) -> Path:
    """A directory holding copies of `<source>/<name>` for `names`, the files `written` (name, text) and
    our /etc/passwd and /etc/group (user `sandbox`, uid 1000). Copied: what others may read (nothing the
    sandbox uid could not read through a bind either; /etc/ssl/private stays behind), symlinks inside
    directories as links, a top-level symlink as what it points to (as a bind would). Named by a digest
    of the sources' paths, modes, sizes, times and link targets (and the written files), so a process
    started after /etc changed makes a new one; made once per change and kept (about 1 MiB), never
    modified, so sandboxes using an older one are unaffected."""
    entries: list[tuple[str, Path, os.stat_result]] = []
    for name in names:
        src = source / name
        if src.exists():
            _walk(src, name, os.stat(src), entries)
    state = [(rel, st.st_mode, st.st_size, st.st_mtime_ns, _link(p, st)) for rel, p, st in entries]
    made = {**IDENTITY, **dict(written)}
    digest = hashlib.sha1(repr((str(source), state, made)).encode()).hexdigest()[:12]
    target = BASE_DIR / "etc-view" / digest
    if target.is_dir():
        return target
    with base_dir_lock():
        if target.is_dir():
            return target
        tmp = target.with_name(f".{digest}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o755, parents=True)
        for rel, src, st in entries:
            dst = tmp / rel
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISDIR(st.st_mode):
                dst.mkdir(mode=0o755)
            else:
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o644)
        for name, text in made.items():
            (tmp / name).write_text(text)
            os.chmod(tmp / name, 0o644)
        os.chmod(tmp, 0o755)
        tmp.rename(target)
    return target


def _walk(path: Path, rel: str, st: os.stat_result, out: list[tuple[str, Path, os.stat_result]]) -> None:
    """Collect what of `path` others may read: directories they may list, files they may read, links."""
    if stat.S_ISLNK(st.st_mode):
        out.append((rel, path, st))
    elif stat.S_ISDIR(st.st_mode) and st.st_mode & 0o005 == 0o005:
        out.append((rel, path, st))
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            _walk(Path(entry.path), f"{rel}/{entry.name}", entry.stat(follow_symlinks=False), out)
    elif stat.S_ISREG(st.st_mode) and st.st_mode & 0o004:
        out.append((rel, path, st))


def _link(path: Path, st: os.stat_result) -> str:
    return os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
