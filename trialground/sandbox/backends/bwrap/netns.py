"""Outbound-only networking for a sandbox's own network namespace, through slirp4netns.

Every sandbox has a network namespace of its own, networked or not: the host's (its loopback listeners,
its abstract unix sockets, its interfaces) is never shared. A networked sandbox gets an uplink: one
`slirp4netns` process on the host, attached to the sandbox's namespace before any code of the sandbox
runs. It makes a tap device `tap0` there (10.0.2.100/24, default route via 10.0.2.2, DNS relayed by
10.0.2.3 to the host's resolver, MTU 65520) and carries the sandbox's TCP and UDP out through ordinary
sockets of the host, so the sandbox reaches what the host reaches on the network, and nothing the host
offers only to itself:

- `--disable-host-loopback`: 10.0.2.2 and every 127.0.0.0/8 address are refused, so the host's loopback
  listeners are unreachable (inside, 127.0.0.1 is the sandbox's own loopback).
- abstract unix sockets are per network namespace: the host's are not there to connect to.
- no port is forwarded into the sandbox: nothing outside can connect in.
- `--enable-sandbox --enable-seccomp`: slirp4netns itself runs in a mount namespace of its own with
  capabilities dropped and a syscall filter, since it parses the sandbox's packets.
- it is started by `unshare --mount --propagation private`: slirp4netns makes only its new root private
  before detaching the old one, so in a namespace copied straight from the host the detach would reach
  back, through the workspaces' shared mounts, and unmount every workspace overlay on the host (all
  sandboxes of every process, mid-episode). In a private copy nothing it unmounts propagates.

The uplink lives as long as the sandbox's PID 1: `Uplink.close` ends it (closing its exit pipe, then
SIGKILL), and it also ends by itself when we die (the pipe closes). Without slirp4netns a networked
sandbox is refused (`require`), never given the host's namespace instead. Its traffic is not accounted to
the sandbox's cgroup (slirp4netns runs in ours).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import select
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable

from trialground.errors import SandboxError

GATEWAY, DNS, ADDRESS = "10.0.2.2", "10.0.2.3", "10.0.2.100"
RESOLV_CONF = f"nameserver {DNS}\n"  # the sandbox's /etc/resolv.conf: slirp4netns's DNS relay
ATTACH_TIMEOUT_S = 20.0


@functools.cache
def helper() -> str | None:
    """The slirp4netns binary, None when it is not installed."""
    return shutil.which("slirp4netns")


@functools.cache
def _unshare() -> str | None:
    return shutil.which("unshare")


def require() -> list[str]:
    """The command that starts the helper (in a private copy of our mount namespace); SandboxError when
    it cannot be started so (a networked sandbox is then refused)."""
    path = helper()
    if path is None:
        raise SandboxError(
            "network=True needs slirp4netns, which gives a sandbox outbound access from a network namespace "
            "of its own (Debian/Ubuntu: apt-get install slirp4netns; Fedora: dnf install slirp4netns); "
            "without it a networked sandbox would share the host's network, so it is refused",
            kind="config",
        )
    if os.geteuid() != 0:
        # slirp4netns attached from an unprivileged host process reports its tap device and then never
        # becomes ready (seen in the unprivileged CI stage); refused loudly rather than half-attached.
        raise SandboxError(
            "network=True is supported only when trialground runs as root: attaching slirp4netns to a "
            "sandbox from an unprivileged process does not work yet; the sandbox is refused, never given "
            "the host's network",
            kind="config",
        )
    unshare = _unshare()
    if unshare is None:
        raise SandboxError(
            "network=True needs util-linux's unshare: slirp4netns is started in a private copy of the mount "
            "namespace, or its own namespace set-up would unmount every sandbox's workspace on the host",
            kind="config",
        )
    return [unshare, "--mount", "--propagation", "private", "--", path]


class Uplink:
    """One running slirp4netns serving one sandbox's network namespace."""

    def __init__(self, proc: subprocess.Popen[bytes], exit_fd: int) -> None:
        self.proc = proc
        self._exit_fd = exit_fd
        self._owner = os.getpid()  # a forked copy of us must never end the parent's uplink

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        """End it now (synchronous: it exits on its exit pipe's EOF; SIGKILL makes sure). Idempotent. In a
        forked copy of the process that started it, only that copy's descriptor is closed."""
        if self._exit_fd >= 0:
            os.close(self._exit_fd)
            self._exit_fd = -1
        if os.getpid() != self._owner:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def __del__(self) -> None:
        if getattr(self, "_exit_fd", -1) >= 0:
            self.close()


async def attach(pid: int, alive_fd: int | None = None, *, timeout: float = ATTACH_TIMEOUT_S) -> Uplink:
    """Start an uplink for the network namespace of host process `pid` and wait until `tap0` is configured.

    The namespace is opened first and handed over as a descriptor, so a `pid` reused meanwhile cannot
    point slirp4netns elsewhere; `alive_fd` (a pidfd of `pid`, readable once it ended) confirms that the
    namespace opened is still that process's. Raises SandboxError, with slirp4netns's own message, when it
    cannot be attached.
    """
    command = require()
    try:
        ns_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"the sandbox's network namespace cannot be opened: {exc.strerror}") from exc
    opened = [ns_fd]
    try:
        # The sandbox brings its loopback device up itself (bubblewrap over netlink, the fork server's PID 1
        # with an ioctl); slirp4netns configuring the namespace at the same time can make bubblewrap's
        # netlink request fail, so it starts once that is done.
        await _loopback_up(pid, alive_fd, timeout)
        if alive_fd is not None and _readable(alive_fd):
            raise SandboxError("the sandbox ended before its network was attached")
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        opened += [ready_r, ready_w, exit_r, exit_w]
        argv = [
            *command, "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
            "--enable-seccomp", f"--ready-fd={ready_w}", f"--exit-fd={exit_r}", "--netns-type=path",
        ]  # fmt: skip
        argv += [f"/proc/self/fd/{ns_fd}", "tap0"]
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True,
                pass_fds=[ns_fd, ready_w, exit_r], start_new_session=True,
            )  # fmt: skip
            uplink = Uplink(proc, exit_w)
            for fd in (ns_fd, ready_w, exit_r):
                os.close(fd)
            opened = [ready_r]
            try:
                ready = await _wait_readable(ready_r, timeout)
                signal_byte = os.read(ready_r, 1) if ready else b""
            except BaseException:
                uplink.close()
                raise
            if signal_byte != b"1":
                uplink.close()
                log.seek(0)
                said = log.read(4096).decode(errors="replace").strip()
                why = "it did not report ready in time" if not ready else said or "it exited saying nothing"
                raise SandboxError(f"the sandbox's network (slirp4netns) could not be attached: {why}")
        return uplink
    finally:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)


async def _loopback_up(pid: int, alive_fd: int | None, timeout: float) -> None:
    """Wait until 127.0.0.1 is a local address in `pid`'s network namespace (its loopback is up)."""
    deadline = asyncio.get_running_loop().time() + timeout
    delay = 0.0005
    while True:
        try:
            with open(f"/proc/{pid}/net/fib_trie", encoding="ascii", errors="replace") as f:
                if "127.0.0.1" in f.read():
                    return
        except OSError as exc:
            raise SandboxError(f"the sandbox ended before its network was attached ({exc.strerror})") from exc
        if alive_fd is not None and _readable(alive_fd):
            raise SandboxError("the sandbox ended before its network was attached")
        if asyncio.get_running_loop().time() > deadline:
            raise SandboxError("the sandbox did not bring its loopback device up in time")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


async def _wait_readable(fd: int, timeout: float) -> bool:
    """Whether `fd` became readable (data or EOF) within `timeout`, without blocking the event loop."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: None if done.done() else done.set_result(None))
    try:
        await asyncio.wait_for(done, timeout)
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)


class BubblewrapHandshake:
    """The two pipes of a networked bubblewrap start: bubblewrap writes its `--info-fd` JSON (the sandbox's
    pid) on one and waits on its `--block-fd` for our byte once the uplink is attached."""

    def __init__(self) -> None:
        self.info_r, self.info_w = os.pipe2(os.O_CLOEXEC)
        self.block_r, self.block_w = os.pipe2(os.O_CLOEXEC)
        self.reported = False  # bubblewrap said which pid the sandbox is

    def theirs(self) -> tuple[int, int]:
        return self.info_w, self.block_r

    def close_theirs(self) -> None:
        for fd in (self.info_w, self.block_r):
            with contextlib.suppress(OSError):
                os.close(fd)

    async def attach(self, attach_uplink: Callable[[int], Awaitable[None]]) -> None:
        """Read the sandbox's pid, `attach_uplink(pid)`, then let bubblewrap go on."""
        pid = await asyncio.wait_for(_child_pid(self.info_r), timeout=ATTACH_TIMEOUT_S)
        self.reported = True
        await attach_uplink(pid)
        try:
            os.write(self.block_w, b"g")
        except OSError as exc:  # nobody reads the block pipe: bubblewrap's sandbox is gone
            self.reported = False
            raise SandboxError(f"bubblewrap ended before its network was attached ({exc.strerror})") from exc

    def close(self) -> None:
        for fd in (self.info_r, self.block_w):
            with contextlib.suppress(OSError):
                os.close(fd)


async def _readable_soon(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: None if ready.done() else ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _child_pid(fd: int) -> int:
    """The `child-pid` of bubblewrap's `--info-fd` JSON (its host pid of the sandbox's PID 1)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await _readable_soon(loop, fd)
            continue
        data += chunk
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return int(json.loads(data)["child-pid"])
        if not chunk:
            raise SandboxError("bubblewrap ended before reporting the sandbox's pid")
