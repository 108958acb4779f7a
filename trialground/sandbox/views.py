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
NETWORK_ETC_FILES = ("resolv.conf", "hosts", "gai.conf", "host.conf")
IDENTITY = {
    "passwd": f"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:{INNER_UID}:{INNER_UID}::{WORKSPACE}:/bin/bash\n",
    "group": f"root:x:0:\nsandbox:x:{INNER_UID}:\n",
}


@functools.cache
def runtime_source(prefix: str) -> str:
    """Where bubblewrap (running as the unprivileged sandbox uid) can reach the runtime from."""
    if os.geteuid() != 0 or not mounts.CAN_MOUNT:
        return prefix
    digest = hashlib.sha1(prefix.encode()).hexdigest()[:12]
    with base_dir_lock():
        return str(mounts.readonly_view(Path(prefix), BASE_DIR / "runtime" / digest))


@functools.cache
def etc_view(names: tuple[str, ...], source: Path = Path("/etc")) -> Path:
    """A directory holding copies of `<source>/<name>` for `names` and our /etc/passwd and /etc/group (user
    `sandbox`, uid 1000). Copied: what others may read (nothing the sandbox uid could not read through a
    bind either; /etc/ssl/private stays behind), symlinks inside directories as links, a top-level
    symlink as what it points to (as a bind would). Named by a digest of the sources' paths, modes,
    sizes, times and link targets, so a process started after /etc changed makes a new one; made once
    per change and kept (about 1 MiB), never modified, so sandboxes using an older one are unaffected."""
    entries: list[tuple[str, Path, os.stat_result]] = []
    for name in names:
        src = source / name
        if src.exists():
            _walk(src, name, os.stat(src), entries)
    state = [(rel, st.st_mode, st.st_size, st.st_mtime_ns, _link(p, st)) for rel, p, st in entries]
    digest = hashlib.sha1(repr((str(source), state, IDENTITY)).encode()).hexdigest()[:12]
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
        for name, text in IDENTITY.items():
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
