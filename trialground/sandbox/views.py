"""Host files and directories that sandboxes see read-only: the Python runtime and a few /etc entries."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from trialground.sandbox import mounts
from trialground.sandbox.base import WORKSPACE
from trialground.sandbox.workspace import BASE_DIR

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


def identity_files() -> tuple[Path, Path]:
    """/etc/passwd and /etc/group for inside the sandbox (user `sandbox`, uid 1000)."""
    d = BASE_DIR / "etc"
    passwd, group = d / "passwd", d / "group"
    if not passwd.exists():
        d.mkdir(parents=True, exist_ok=True)
        for name, text in IDENTITY.items():
            tmp = d / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.replace(d / name)
    return passwd, group


@functools.cache
def runtime_source(prefix: str) -> str:
    """Where bubblewrap (running as the unprivileged sandbox uid) can reach the runtime from."""
    if os.geteuid() != 0 or not mounts.CAN_MOUNT:
        return prefix
    digest = hashlib.sha1(prefix.encode()).hexdigest()[:12]
    return str(mounts.readonly_view(Path(prefix), BASE_DIR / "runtime" / digest))


def etc_argv(names: tuple[str, ...]) -> list[str]:
    """bubblewrap arguments that show host /etc entries `names` (those that exist) plus our identity files."""
    argv: list[str] = []
    for name in names:
        if os.path.exists(f"/etc/{name}"):
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    passwd, group = identity_files()
    return [*argv, "--ro-bind", str(passwd), "/etc/passwd", "--ro-bind", str(group), "/etc/group"]
