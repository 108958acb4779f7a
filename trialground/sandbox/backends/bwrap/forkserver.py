"""The fork-server launcher: new sandboxes forked from a started template instead of one bubblewrap each.

A bubblewrap start costs a process spawn, bubblewrap's own mounts and then a whole interpreter start for the
supervisor, per sandbox. Here one template process (`template.py`) per host process and Python runtime is
started once; each new sandbox is a fork of it that builds the same namespaces, root file system, limits and
lock-down that `bwrap_argv` asks bubblewrap for, and is then the very same supervisor speaking the same
protocol. The sandbox behaves alike under both launchers (one security suite runs against both); rootfs
sandboxes always use bubblewrap, since their interpreter must come from the image.

The template runs as we do (as root on a root host: it must read the runtime at its real path, which the
sandbox uid may not traverse; each sandbox drops to uid 65534 first thing), with a cleared environment, in
our cgroup, and dies when we close its socket (at exit, or when we die); every sandbox dies with its
intermediate process and that with the template. A sandbox is handled through `SandboxProcess`: a pidfd of
its PID 1 (kill, wait; immune to pid reuse) and its supervisor's stdio pipes.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import ctypes
import errno
import functools
import marshal
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import seccomp, spawn, views
from trialground.sandbox.backends.bwrap.boot import SUPERVISOR_SOURCE
from trialground.sandbox.backends.bwrap.cgroup import Cgroup
from trialground.sandbox.workspace import BASE_DIR

# the supervisor's shipped source (its parts concatenated) and the template's, each one module there
SOURCES = (SUPERVISOR_SOURCE, (Path(__file__).with_name("template.py")).read_text())
# System call numbers the template calls through libc's syscall() (no wrappers in Python 3.11's os).
_NEW_MOUNT_API = {"open_tree": 428, "move_mount": 429, "mount_setattr": 442}  # the same on both
SYSCALLS = {
    "x86_64": {"pivot_root": 155, "capset": 126, **_NEW_MOUNT_API},
    "aarch64": {"pivot_root": 41, "capset": 91, **_NEW_MOUNT_API},
}
SYSCALLS["amd64"], SYSCALLS["arm64"] = SYSCALLS["x86_64"], SYSCALLS["aarch64"]
UNKNOWN_EXIT = -1  # PID 1 is not our child: it ended, but its exit status is not ours to read
SEND_TIMEOUT_S = 30.0  # how long a request waits for a template that is not reading
_BOOT = (
    "import posix,marshal,sys\nb=b''\nwhile len(b)<{n}:\n c=posix.read(0,{n}-len(b))\n"
    " if not c:raise SystemExit(1)\n b+=c\n"
    "for name,code in zip(('supervisor','template'),marshal.loads(b)):\n"
    " m=type(sys)(name);sys.modules[name]=m\n"
    " exec(code if {compiled} else compile(code,name+'.py','exec'),m.__dict__)\n"
    "posix.close(0);sys.modules['template'].main({fd})"
)


@functools.cache
def available() -> bool:
    """Whether sandboxes can start here from the fork server: a known architecture, pidfds, and the new
    mount API's `mount_setattr` (Linux >= 5.12, not refused by a seccomp profile of our own). Where not,
    the `bwrap` backend starts them with bubblewrap, which isolates alike."""
    if platform.machine() not in SYSCALLS or not hasattr(os, "pidfd_open"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    number = SYSCALLS[platform.machine()]["mount_setattr"]
    ctypes.set_errno(0)
    libc.syscall(number, -1, b"", 0, None, 0)  # a bad descriptor: EBADF where the call exists
    return ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM)


class Template:
    """One started template process and our end of its socket."""

    def __init__(self, python: str, same_version: bool, uid: int | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        codes = [
            compile(src, f"{name}.py", "exec")
            for src, name in zip(SOURCES, ("supervisor", "template"), strict=True)
        ]
        payload = marshal.dumps(tuple(codes) if same_version else SOURCES)
        boot = _BOOT.format(n=len(payload), compiled=same_version, fd=theirs.fileno())
        argv = [python, "-I", "-S", "-c", boot]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), cwd="/",
                env=env,
            )  # fmt: skip
        finally:
            theirs.close()
        assert self.proc.stdin is not None
        with self.proc.stdin:
            self.proc.stdin.write(payload)
        self.sock = ours
        self.lock = threading.Lock()
        newroot = BASE_DIR / "newroot"
        newroot.mkdir(mode=0o755, exist_ok=True)
        settings = {
            "newroot": str(newroot),
            "top": _top_level(),
            "inner_uid": views.INNER_UID,
            "sandbox_uid": uid,
            "cap_last": int(Path("/proc/sys/kernel/cap_last_cap").read_text()),
            "seccomp": seccomp.program(),
            **{f"sys_{name}": number for name, number in SYSCALLS[platform.machine()].items()},
        }
        self.sock.send(marshal.dumps(settings))

    def send(self, spec: dict, workspace: Path, fds: list[int]) -> None:
        """One sandbox's request: its settings, its workspace's host path (sent apart, so the sandbox can
        wipe it from memory once bound), and its four descriptors. Never blocks: BlockingIOError when the
        template is not reading (stopped, or far behind)."""
        parts = [len(head := marshal.dumps(spec)).to_bytes(4, "big"), head, os.fsencode(workspace)]
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        with self.lock:  # sendmsg, not send_fds: 3.11's send_fds drops its flags argument
            self.sock.sendmsg(parts, rights, socket.MSG_DONTWAIT)

    def dead(self) -> bool:
        return self.proc.poll() is not None

    def close(self) -> None:
        """Close our end: the template exits, and with it every sandbox it made."""
        self.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def _top_level() -> list[tuple[str, str, str]]:
    """/usr and the top-level links or directories programs need, as bubblewrap's launcher shows them."""
    entries = [("dir", "/usr", "/usr")]
    for name in ("lib", "lib32", "lib64", "libx32", "bin", "sbin"):
        host = f"/{name}"
        if os.path.islink(host):
            entries.append(("link", host, os.readlink(host)))
        elif os.path.isdir(host):
            entries.append(("dir", host, host))
    return entries


_templates: dict[tuple[int, str, int | None], Template] = {}
_templates_lock = threading.Lock()


def _forget_parents_templates() -> None:
    """In a forked copy of us: drop our copies of the parent's template sockets, or its templates would
    live on until we exit too."""
    for template in _templates.values():
        template.sock.close()
    _templates.clear()


@atexit.register
def _close_templates() -> None:
    with _templates_lock:
        for key, template in list(_templates.items()):
            if key[0] == os.getpid():
                template.close()
        _templates.clear()


os.register_at_fork(after_in_child=_forget_parents_templates)


def _template(prefix: str, uid: int | None, *, replace: Template | None = None) -> Template:
    """The template of this process for runtime `prefix` and host uid `uid`, started on first use (and
    again when `replace`, a template that died, is still the current one)."""
    key = (os.getpid(), prefix, uid)  # a forked copy of us starts its own: the socket is not ours to share
    with _templates_lock:
        current = _templates.get(key)
        if current is not None and current is replace:
            _templates.pop(key)
            current.close()
            current = None
        if current is None:
            same = os.path.realpath(prefix) == os.path.realpath(sys.base_prefix)
            current = _templates[key] = Template(f"{prefix}/bin/python3", same, uid)
        return current


class SandboxProcess:
    """A fork-server sandbox's PID 1 as the `bwrap` backend handles it (the shape of an asyncio Process:
    pid, stdin/stdout/stderr streams, returncode, kill, wait)."""

    def __init__(
        self,
        pid: int,
        pidfd: int,
        pipes: tuple[asyncio.StreamWriter, asyncio.StreamReader, asyncio.StreamReader],
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self.stdin, self.stdout, self.stderr = pipes
        self._transports = transports
        self._returncode: int | None = None

    @property
    def returncode(self) -> int | None:
        if self._returncode is None and self._pidfd >= 0 and _readable(self._pidfd):
            self._ended()
        return self._returncode

    def _ended(self) -> None:
        self._returncode = UNKNOWN_EXIT
        os.close(self._pidfd)
        self._pidfd = -1

    def kill(self) -> None:
        """SIGKILL PID 1: every process of its PID namespace dies with it."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def wait(self) -> int:
        if self.returncode is None:
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            pidfd = self._pidfd
            loop.add_reader(pidfd, lambda: None if done.done() else done.set_result(None))
            try:
                await done
            finally:
                loop.remove_reader(pidfd)
            if self._pidfd == pidfd:  # not released meanwhile
                self._ended()
        assert self._returncode is not None
        return self._returncode

    def close_pipes(self) -> None:
        for transport in self._transports:
            transport.close()

    def release(self) -> None:
        """Close everything of ours now, whether or not the loop it belongs to still runs (a closed loop
        cannot close its transports: their pipes are closed directly)."""
        for transport in self._transports:
            try:
                transport.close()
            except RuntimeError:  # the loop is closed
                pipe = transport.get_extra_info("pipe")
                if pipe is not None:
                    pipe.close()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        if self._returncode is None:  # released: nothing to wait for or kill through us any more
            self._returncode = UNKNOWN_EXIT

    def __del__(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)


def _readable(fd: int) -> bool:
    """Whether `fd` is readable now (poll: select() refuses descriptors past 1023, which a busy host has)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


async def start(
    *,
    python_prefix: str,
    uid: int | None,
    workspace: Path,
    views_: list[tuple[str, str]],
    network: bool,
    tmp_bytes: int,
    cgroup: Cgroup | None,
    before_go: Callable[[int, int], Awaitable[None]] | None = None,
) -> SandboxProcess:
    """A new sandbox from the template, in `cgroup` before it runs anything, its supervisor about to start.
    Raises SandboxError (with the reason) when it could not be made. Cancelled at any point, it leaves
    nothing behind: a PID 1 made after that finds its stdin closed and exits before running anything.

    The sandbox always has a network namespace of its own. `before_go(pid, pidfd)` runs once PID 1 exists
    and before it may go on (the networked sandbox's uplink is attached there); if it raises, PID 1 ends
    without running anything and the error propagates."""
    spec = {"views": views_, "network": network, "tmp_bytes": tmp_bytes}
    replaced = False
    while True:
        template = _template(python_prefix, uid)
        made = await _request(template, spec, workspace, cgroup, before_go)
        if isinstance(made, SandboxProcess):
            return made
        if template.dead() and not replaced:  # it died with our request: one new one, once
            _template(python_prefix, uid, replace=template)
            replaced = True
            continue
        if template.dead():
            made = f"its template died (exit status {template.proc.returncode})"
        raise SandboxError(f"the sandbox (the fork server) failed to start: {made}")


async def _request(
    template: Template,
    spec: dict,
    workspace: Path,
    cgroup: Cgroup | None,
    before_go: Callable[[int, int], Awaitable[None]] | None = None,
) -> SandboxProcess | str:
    """Ask `template` for one sandbox: its process, or why not (the sandbox's own message)."""
    info, info_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with info:
        try:
            with spawn.stdio_pipes() as (theirs, ours), info_theirs:
                await _send(template, spec, workspace, [*theirs, info_theirs.fileno()])
        except _TemplateGone as exc:
            return str(exc)
        # From here our three ends belong to the streams (closed with the transports).
        writer, reader, errors, transports = await spawn.connect_pipes(*ours)
        reply = None
        try:
            reply = await _receive(info, timeout=30)
            if reply is None:
                writer.close()  # a PID 1 that exists but never reported must not wait for our go
                err = b""
                with contextlib.suppress(TimeoutError):
                    err = await asyncio.wait_for(errors.read(1 << 16), timeout=5)
                return err.decode(errors="replace").strip() or "no report from it"
        finally:
            if reply is None:  # no sandbox (or cancelled): nothing of it may stay open
                for transport in transports:
                    transport.close()
    pid, pidfd = reply
    # PID 1 waits for our go and cannot have ended on its own, unless its set-up failed: then its pid may
    # be free again, and must not be moved into the cgroup (whose teardown kills what it holds).
    if cgroup is not None and not _readable(pidfd):
        with contextlib.suppress(ProcessLookupError, OSError):
            cgroup.add(pid)
    if before_go is not None:
        try:
            await before_go(pid, pidfd)
        except BaseException:
            for transport in transports:  # PID 1 reads EOF instead of the go and exits
                transport.close()
            os.close(pidfd)
            raise
    writer.write(b"g")  # PID 1 may go on: it is in the sandbox's cgroup (and networked, if it is)
    return SandboxProcess(pid, pidfd, (writer, reader, errors), transports)


class _TemplateGone(Exception):
    """The template's socket refused a request: the template is gone."""


async def _send(template: Template, spec: dict, workspace: Path, fds: list[int]) -> None:
    """Hand one request to `template`; a template not reading just now is waited for without blocking the
    event loop, up to SEND_TIMEOUT_S."""
    deadline = time.monotonic() + SEND_TIMEOUT_S
    while True:
        try:
            template.send(spec, workspace, fds)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SandboxError("the fork server is not taking requests") from None
            await asyncio.sleep(0.005)
        except OSError as exc:  # gone (killed from outside)
            raise _TemplateGone(f"its template is gone ({exc.strerror})") from exc


async def _receive(info: socket.socket, timeout: float) -> tuple[int, int] | None:
    """The intermediate's report: PID 1's host pid and a pidfd of it; None when it ended without one."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[int, int] | None] = loop.create_future()
    info.setblocking(False)

    def readable() -> None:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(info, 64, 1)
        except BlockingIOError:
            return
        for fd in fds:  # close-on-exec (3.11's recv_fds drops its flags argument: no MSG_CMSG_CLOEXEC)
            os.set_inheritable(fd, False)
        if done.done():
            for fd in fds:
                os.close(fd)
            return
        if not msg or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            done.set_result(None)
            return
        done.set_result((marshal.loads(msg), fds[0]))

    loop.add_reader(info.fileno(), readable)
    try:
        return await asyncio.wait_for(done, timeout)
    except TimeoutError:
        return None
    except BaseException:  # cancelled: a report that did arrive must not leak its pidfd
        if done.done() and not done.cancelled() and (result := done.result()) is not None:
            os.close(result[1])
        raise
    finally:
        loop.remove_reader(info.fileno())
