"""bubblewrap's command line for one sandbox (the `bwrap` launcher), the environment commands start with,
and the read-only views both launchers show (`sandbox_views`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import reset, views
from trialground.sandbox.backends.bwrap.boot import python_prefix, supervisor_payload
from trialground.sandbox.base import WORKSPACE, SandboxConfig

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
INNER_UID = views.INNER_UID


def bwrap_available() -> bool:
    return os.path.exists(BWRAP) and os.access(BWRAP, os.X_OK)


def default_env(config: SandboxConfig) -> dict[str, str]:
    path = "/usr/local/bin:/usr/bin:/bin"
    if not config.rootfs:
        path = f"{python_prefix(config)}/bin:{path}"
    return {"PATH": path, "HOME": WORKSPACE, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "USER": "sandbox"}


def _rootfs_binds(rootfs: str) -> list[str]:
    """Each top-level entry of `rootfs` bound read-only on a fresh root, so /proc, /dev, /tmp and
    /workspace can be mounted even though the image itself stays read-only."""
    argv: list[str] = []
    for entry in sorted(os.scandir(rootfs), key=lambda e: e.name):
        if entry.name in ("proc", "dev", "tmp", "sys", "workspace"):
            continue
        dest = f"/{entry.name}"
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry.path), dest]
        else:
            argv += ["--ro-bind", entry.path, dest]
    return argv


def sandbox_views(config: SandboxConfig) -> list[tuple[str, str]]:
    """(host source, sandbox path) of the read-only views besides /usr: /etc, and the Python runtime when
    it is not under /usr."""
    if config.network:
        etc = views.etc_view(views.ETC_FILES + views.NETWORK_ETC_FILES, written=views.NETWORK_ETC_WRITTEN)
    else:
        etc = views.etc_view(views.ETC_FILES)
    shown = [(str(etc), "/etc")]
    prefix = python_prefix(config)
    if not prefix.startswith("/usr/"):
        shown.append((views.runtime_source(prefix), prefix))
    for view in config.views:
        shown.append((views.runtime_source(view.source) if view.kept else view.source, view.target))
    return shown


def bwrap_argv(
    config: SandboxConfig,
    workspace: Path,
    seccomp_fd: int,
    tmp_mb: int,
    net_fds: tuple[int, int] | None = None,
) -> list[str]:
    """bubblewrap's command line. Always a network namespace of its own; a networked sandbox also gets
    `net_fds` (info, block): bubblewrap reports the sandbox's pid on the first and waits on the second
    until the host has attached the uplink (`netns.py`)."""
    argv = [BWRAP, "--unshare-user", "--uid", str(INNER_UID), "--gid", str(INNER_UID), "--unshare-pid"]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    argv.append("--unshare-net")
    if config.network:
        if net_fds is None:
            raise SandboxError("a networked sandbox's bubblewrap needs its info and block descriptors")
        argv += ["--info-fd", str(net_fds[0]), "--block-fd", str(net_fds[1])]
    argv += ["--new-session", "--die-with-parent", "--as-pid-1", "--disable-userns", "--cap-drop", "ALL"]
    if config.rootfs:
        if not os.path.isdir(config.rootfs):
            raise SandboxError(f"rootfs {config.rootfs!r} is not a directory", kind="config")
        argv += _rootfs_binds(config.rootfs)
    else:
        argv += ["--ro-bind", "/usr", "/usr"]
        for name in ("lib", "lib32", "lib64", "libx32", "bin", "sbin"):
            host = f"/{name}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        for source, target in sandbox_views(config):
            argv += ["--ro-bind", source, target]
    # /proc/sys read-only: the sandbox's user is uid 0 of the user namespace that owns its IPC and PID
    # namespaces, so their sysctls (kernel.shmmax, msgmni, sem, pid_max, fs.mqueue.*) would otherwise be
    # writable, kept across reuse, and able to starve the next occupant.
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    argv += ["--dev", "/dev", "--mqueue", reset.MQUEUE]
    argv += ["--size", str(tmp_mb << 20), "--tmpfs", "/dev/shm"]
    argv += ["--size", str(tmp_mb << 20), "--tmpfs", "/tmp", "--bind", str(workspace), WORKSPACE]
    # Everything but /workspace, /tmp and /dev/shm read-only (the root and /dev are tmpfs bubblewrap made).
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/"]
    argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--clearenv", "--setenv", "PATH", default_env(config)["PATH"], "--setenv", "LANG", "C.UTF-8"]
    python = "python3" if config.rootfs else f"{python_prefix(config)}/bin/python3"
    return [*argv, "--", python, "-I", "-S", "-c", supervisor_payload(config)[0]]
