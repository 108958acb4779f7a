"""Attacks aimed at the fork-server launcher (sandboxes forked from one started template) and at what it
builds differently from bubblewrap, each with its containment asserted from the host side. Most run
against both launchers (the `sandbox` fixture), so a difference between them shows as one failing id."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from seckit import CONFIG, LIMITS, ROOT_ONLY_REASON, host_processes_with, sandbox_host_pids

from trialground.sandbox import mounts
from trialground.sandbox.backends.bwrap import seccomp
from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox, bwrap_available
from trialground.sandbox.base import ExecStatus, Sandbox
from trialground.sandbox.factory import open_sandbox

pytestmark = pytest.mark.security
NR = seccomp.table()
FORKSERVER = CONFIG.model_copy(update={"launcher": "forkserver", "prewarm": 0})
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

# Scans the (fast-path) Python command's own memory for byte strings. Each needle comes as two hex halves
# that the program never joins, so a hit is a copy that was in memory before it ran, not one it made.
MEMORY_SCAN = """
import ctypes, sys
needles = [tuple(bytes.fromhex(h) for h in arg.split(":")) for arg in sys.argv[1:]]
found = set()
for line in open("/proc/self/maps").read().splitlines():
    span, perms = line.split()[:2]
    if not perms.startswith("rw"):
        continue
    lo, hi = (int(x, 16) for x in span.split("-"))
    data = ctypes.string_at(lo, hi - lo)  # not /proc/self/mem: a non-dumpable process may not open it
    for i, (head, tail) in enumerate(needles):
        at = data.find(head)
        while at >= 0 and i not in found:
            if data.startswith(tail, at + len(head)):
                found.add(i)
            at = data.find(head, at + 1)
print(*sorted(found))
"""


def py(code: str, *args: str) -> list[str]:
    return ["python3", "-I", "-S", "-c", code, *args]


def halves(text: str) -> str:
    data = text.encode()
    return f"{data[: len(data) // 2].hex()}:{data[len(data) // 2 :].hex()}"


def status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return line.split(":", 1)[1].strip()
    raise KeyError(field)


def alive(pid: int) -> bool:
    try:
        return status_field(pid, "State")[0] not in "ZX"
    except (OSError, KeyError):
        return False


def pid1_and_launchers(sb: Sandbox) -> tuple[int, list[int]]:
    """Host pid of the sandbox's PID 1, and the host processes between it and us (the fork server's
    intermediate and template, or bubblewrap)."""
    pid1 = next(p for p in sandbox_host_pids(sb) if status_field(p, "NSpid").split()[-1] == "1")
    chain, parent = [], int(status_field(pid1, "PPid"))
    while parent not in (0, 1, os.getpid()):
        chain.append(parent)
        parent = int(status_field(parent, "PPid"))
    return pid1, chain


async def wait_until(predicate, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


# -- what a sandbox learns from being a fork of the template ---------------------------------------------
async def test_command_memory_holds_no_host_path_of_its_workspace(sandbox: Sandbox) -> None:
    """A Python command runs in a fork of the supervisor, which under the fork server is a fork of the
    template: what the template and PID 1 held while making the sandbox is in the command's memory. The
    workspace's host path travels apart from the other settings and is wiped once bound. (After a restore
    both launchers show host paths anyway, in the overlay's options in /proc/self/mountinfo.)"""
    root = str(sandbox.workspace.root)  # type: ignore[attr-defined]
    r = await sandbox.exec(py(MEMORY_SCAN, halves(root)))
    assert r.ok, r
    assert r.stdout.split() == [], f"the host path {root} is in the command's memory"


async def test_command_memory_holds_no_host_mount_table(sandbox: Sandbox, tmp_path: Path) -> None:
    """Nothing of the host's mount table (the host paths of every other sandbox's workspace, of any host
    process, and of every host mount, here one with a secret name) reaches a sandbox's memory: PID 1 makes
    its views read-only all the way down with mount_setattr instead of reading /proc/self/mountinfo, and
    the template keeps nothing of earlier sandboxes' requests."""
    hidden = tmp_path / f"tg-host-mount-{os.urandom(6).hex()}"
    hidden.mkdir()
    mounted = mounts.CAN_MOUNT and mounts.mount_tmpfs(hidden, 1)
    try:
        needles = [str(sandbox.workspace.root)]  # type: ignore[attr-defined]
        needles += [str(hidden)] if mounted else []
        config = sandbox.config.model_copy(update={"prewarm": 0})  # type: ignore[attr-defined]
        async with await open_sandbox(config) as probe:  # started after both mounts exist
            r = await probe.exec(py(MEMORY_SCAN, *map(halves, needles)))
        assert r.ok, r
        seen = [needles[int(i)] for i in r.stdout.split()]
        assert seen == [], f"host paths in a sandbox's memory: {seen}"
    finally:
        if mounted:
            mounts.umount(hidden)


async def test_sandboxes_do_not_share_randomization(sandbox: Sandbox, request: pytest.FixtureRequest) -> None:
    """Every sandbox of one template has the template's hash seed, address-space layout (and with it the
    stack canary and pointer guard) as its own: one sandbox knows them for all others and for the template,
    a root process. Documented in template.py as a consequence of forking; recorded here as what it is."""
    if isinstance(sandbox, BwrapSandbox) and sandbox.forked():
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="fork-server trade-off: one template, one layout")
        )
    probe = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "print(hash('trialground'), ctypes.cast(libc.printf, ctypes.c_void_p).value, id(None))"
    )
    mine = await sandbox.exec(py(probe))
    async with await open_sandbox(sandbox.config) as other:  # type: ignore[attr-defined]
        theirs = await other.exec(py(probe))
    assert mine.ok and theirs.ok, (mine, theirs)
    hash_a, libc_a, none_a = mine.stdout.split()
    hash_b, libc_b, none_b = theirs.stdout.split()
    assert hash_a != hash_b, "two sandboxes share one hash seed"
    assert libc_a != libc_b and none_a != none_b, "two sandboxes share one address-space layout"


# -- limits and accounting -------------------------------------------------------------------------------
async def test_pids_limit_is_the_same_under_both_launchers(sandbox: Sandbox) -> None:
    """`limits.pids` bounds the command's processes alike under both launchers: the cgroup's pids.max adds
    what of the launcher is in the cgroup (bubblewrap and the supervisor; the fork server's supervisor
    only, its intermediate stays outside)."""
    if getattr(sandbox, "cgroup", None) is None:
        pytest.skip("no cgroup here (cgroup.hierarchy() says why: not root on v1, no delegated v2)")
    lim = LIMITS.model_copy(update={"pids": 6})
    r = await sandbox.exec(
        py(
            "import os, time\nn = 0\ntry:\n    while n < 50:\n        if os.fork() == 0:\n"
            "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
            "except OSError as e:\n    print(n, e.errno)"
        ),
        limits=lim,
    )
    assert r.status is ExecStatus.PIDS_LIMIT, r
    forked, err = map(int, r.stdout.split())
    assert err == errno.EAGAIN
    assert forked + 1 == lim.pids, f"the command ran {forked + 1} processes with limits.pids={lim.pids}"


async def test_cgroup_holds_every_sandbox_process(sandbox: Sandbox) -> None:
    """The start protocol (PID 1 waits for the host's go, sent once it is in its cgroup) leaves no process
    of the sandbox outside the cgroup: seen from the host, in every controller, during a command."""
    cgroup = getattr(sandbox, "cgroup", None)
    if cgroup is None:
        pytest.skip("no cgroup here (cgroup.hierarchy() says why: not root on v1, no delegated v2)")
    marker = "1.3131"  # seconds: long enough to look, short enough to wait for
    task = asyncio.create_task(sandbox.exec(f"sleep {marker} & sleep {marker} & (sleep {marker}) & wait"))
    try:
        assert await wait_until(lambda: len(host_processes_with(f"sleep\x00{marker}")) >= 3)
        inside = set(sandbox_host_pids(sandbox))
        assert len(inside) >= 5, inside  # supervisor, bash, three sleeps (and a subshell)
        for controller, directory in cgroup.dirs.items():
            members = {int(p) for p in (directory / "cgroup.procs").read_text().split()}
            assert inside <= members, (controller, inside - members)
    finally:
        r = await task
    assert r.ok, r
    assert host_processes_with(f"sleep\x00{marker}") == []


async def test_cgroup_paths_reveal_nothing_of_the_host(sandbox: Sandbox) -> None:
    """The sandbox's cgroup namespace is rooted at its own cgroup, so /proc/self/cgroup shows nothing of
    the host's cgroup paths (our pid, the sandbox's name, the host's own cgroup depth): the fork server
    unshares it after the host placed PID 1; bubblewrap is started inside the group, before it clones the
    sandbox with --unshare-cgroup-try."""
    if getattr(sandbox, "cgroup", None) is None:
        pytest.skip("no cgroup here (cgroup.hierarchy() says why: not root on v1, no delegated v2)")
    r = await sandbox.exec(["cat", "/proc/self/cgroup"])
    assert r.ok, r
    paths = {line.split(":", 2)[2] for line in r.stdout.splitlines()}
    assert paths == {"/"}, r.stdout


# -- reaching the launcher -------------------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason=ROOT_ONLY_REASON)
async def test_host_processes_unreachable_by_host_pid(sandbox: Sandbox) -> None:
    """Even knowing their host pids (a fork-server command can read the template's pid off its own stack),
    a command can neither signal, nor open a pidfd of, nor look at its launcher processes (the intermediate
    and the root template, or bubblewrap), its own PID 1 by host pid, or another host process."""
    assert (await sandbox.exec(["true"])).ok
    pid1, launchers = pid1_and_launchers(sandbox)
    assert launchers, "no launcher process between the sandbox and us"
    sentinel = await asyncio.create_subprocess_exec("sleep", "30")
    targets = [*launchers, pid1, sentinel.pid]
    try:
        r = await sandbox.exec(
            py(
                "import errno, os, sys\nfor pid in map(int, sys.argv[1:]):\n"
                "    for name, act in (('kill0', lambda: os.kill(pid, 0)),"
                " ('kill9', lambda: os.kill(pid, 9)), ('pidfd', lambda: os.pidfd_open(pid)),"
                " ('proc', lambda: os.listdir(f'/proc/{pid}'))):\n"
                "        try:\n            act()\n            print(pid, name, 'OK')\n"
                "        except OSError as e:\n            print(pid, name, errno.errorcode[e.errno])",
                *map(str, targets),
            )
        )
        assert r.ok, r
        lines = r.stdout.splitlines()
        assert len(lines) == 4 * len(targets), r
        assert all(line.split()[2] in ("ESRCH", "ENOENT") for line in lines), r.stdout
        assert all(alive(pid) for pid in targets), [(pid, alive(pid)) for pid in targets]
        assert sentinel.returncode is None
        assert (await sandbox.exec(["echo", "still"])).stdout == "still\n"
    finally:
        sentinel.kill()
        await sentinel.wait()


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason=ROOT_ONLY_REASON)
async def test_forkserver_sandbox_dies_with_its_intermediate_and_leaves_nothing() -> None:
    """PID 1's parent-death signal ties it to its intermediate (outside the sandbox, in the host's PID
    namespace), which once PID 1 exists holds no capability and no descriptor and only waits: that one
    dying takes the sandbox along. Closed sandboxes leave no intermediate behind and the template no
    descriptor."""
    sb = await open_sandbox(FORKSERVER)
    try:
        assert (await sb.exec(["true"])).ok
        pid1, launchers = pid1_and_launchers(sb)
        intermediate, template = launchers
        for field in ("CapInh", "CapPrm", "CapEff"):
            assert status_field(intermediate, field) == "0000000000000000", field
        assert status_field(intermediate, "NoNewPrivs") == "1"
        assert os.listdir(f"/proc/{intermediate}/fd") == []
        fds_before = len(os.listdir(f"/proc/{template}/fd"))
        marker = "98765.4242"
        task = asyncio.create_task(sb.exec(f"sleep {marker}"))
        assert await wait_until(lambda: bool(host_processes_with(f"sleep\x00{marker}")))
        os.kill(intermediate, signal.SIGKILL)
        r = await asyncio.wait_for(task, 5)
        assert r.status is ExecStatus.SANDBOX_ERROR, r
        assert await wait_until(lambda: not alive(pid1) and not host_processes_with(f"sleep\x00{marker}"))
        assert alive(template)
    finally:
        await sb.close()

    def children() -> set[int]:
        return {int(c) for c in Path(f"/proc/{template}/task/{template}/children").read_text().split()}

    before = children()
    made = []
    for _ in range(4):
        async with await open_sandbox(FORKSERVER) as each:
            assert (await each.exec(["true"])).ok
            made.append(pid1_and_launchers(each))
    assert all(chain[1] == template for _, chain in made)  # the same template made them all
    gone = [pid for p1, chain in made for pid in (p1, chain[0])]
    assert await wait_until(lambda: not any(alive(pid) for pid in gone)), gone
    assert await wait_until(lambda: children() <= before), children() - before
    assert len(os.listdir(f"/proc/{template}/fd")) == fds_before


@needs_bwrap
async def test_host_pidfd_of_pid1_is_close_on_exec() -> None:
    """The host's pidfd of a fork-server sandbox's PID 1 (it arrives by SCM_RIGHTS) is close-on-exec: a
    program the host process runs with close_fds=False (os.system, a trainer's own subprocesses) could
    otherwise SIGKILL the sandbox or keep its pid pinned."""
    async with await open_sandbox(FORKSERVER) as sb:
        assert (await sb.exec(["true"])).ok
        pidfd = sb._proc._pidfd  # type: ignore[attr-defined]
        assert pidfd >= 0
        assert not os.get_inheritable(pidfd), "the PID 1 pidfd leaks into the host's exec'd children"


# -- what sibling sandboxes share ------------------------------------------------------------------------
async def test_sibling_sandboxes_share_no_ipc_abstract_socket_or_tmp(sandbox: Sandbox) -> None:
    """Two sandboxes of one template (or two bubblewraps): System V IPC, abstract unix sockets, /tmp and
    /dev/shm of one are invisible to the other and to the host."""
    key = int.from_bytes(os.urandom(3), "big") + 1
    name = f"tg-sibling-{os.urandom(4).hex()}"
    owner = asyncio.create_task(
        sandbox.exec(
            py(
                "import ctypes, os, socket, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "key, name = int(sys.argv[1]), sys.argv[2]\n"
                "print('shm', libc.shmget(key, 4096, 0o1666) >= 0)\n"
                "s = socket.socket(socket.AF_UNIX)\ns.bind(b'\\0' + name.encode())\ns.listen()\n"
                "for d in ('/tmp', '/dev/shm'):\n    open(f'{d}/{name}', 'w').close()\n"
                "open('/workspace/ready', 'w').close()\ndeadline = time.time() + 6\n"
                "while not os.path.exists('/workspace/done') and time.time() < deadline:\n"
                "    time.sleep(0.01)\nprint('bound', s.getsockname() == b'\\0' + name.encode())",
                str(key),
                name,
            )
        )
    )
    try:
        ready = sandbox.workspace.ws / "ready"  # type: ignore[attr-defined]
        assert await wait_until(ready.exists), "the first sandbox never got ready"
        async with await open_sandbox(sandbox.config) as other:  # type: ignore[attr-defined]
            r = await other.exec(
                py(
                    "import ctypes, errno, os, socket, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                    "key, name = int(sys.argv[1]), sys.argv[2]\n"
                    "print('shm', libc.shmget(key, 0, 0), errno.errorcode[ctypes.get_errno()])\n"
                    "s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(b'\\0' + name.encode())\n"
                    "    print('abstract CONNECTED')\nexcept OSError as e:\n"
                    "    print('abstract', errno.errorcode[e.errno])\n"
                    "print('files', *(os.path.exists(f'{d}/{name}') for d in ('/tmp', '/dev/shm')))",
                    str(key),
                    name,
                )
            )
        assert r.ok, r
        assert r.stdout.splitlines() == ["shm -1 ENOENT", "abstract ECONNREFUSED", "files False False"]
        # ...and the host's own IPC and network namespaces do not have them either.
        host_keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
        assert str(key) not in host_keys
        with socket.socket(socket.AF_UNIX) as s, pytest.raises(ConnectionRefusedError):
            s.connect(b"\0" + name.encode())
        assert not Path("/tmp", name).exists() and not Path("/dev/shm", name).exists()
    finally:
        await sandbox.write("done", "")
        first = await asyncio.wait_for(owner, 15)
    assert first.stdout.split() == ["shm", "True", "bound", "True"], first  # the first one did have them


# -- namespaces and mounts -------------------------------------------------------------------------------
async def test_raw_clone_into_new_namespaces_refused(sandbox: Sandbox) -> None:
    """The fork server has no counterpart of bubblewrap's --disable-userns (a nested user namespace with
    max_user_namespaces at 1): seccomp alone keeps the sandbox from making namespaces. Every raw clone with
    a CLONE_NEW* flag (also with junk in the upper half of the flags) is refused, clone3 is ENOSYS."""
    flags = [0x10000000, 0x20000, 0x20000000, 0x40000000, 0x2000000, 0x8000000, 0x4000000]
    flags.append(0x10000000 | (1 << 32))
    r = await sandbox.exec(
        py(
            "import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.syscall.restype = ctypes.c_long\nclone, clone3 = map(int, sys.argv[1:3])\n"
            "for flags in map(int, sys.argv[3:]):\n"
            "    ctypes.set_errno(0)\n"
            "    r = libc.syscall(ctypes.c_long(clone), ctypes.c_ulong(flags | 17), ctypes.c_long(0),"
            " ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))\n"
            "    if r == 0:\n        os._exit(0)\n    print(r, ctypes.get_errno())\n"
            "r = libc.syscall(ctypes.c_long(clone3), ctypes.c_long(0), ctypes.c_long(0))\n"
            "print(r, ctypes.get_errno())",
            str(NR["clone"]),
            str(NR["clone3"]),
            *map(str, flags),
        )
    )
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert lines[:-1] == [f"-1 {errno.EPERM}"] * len(flags), r.stdout
    assert lines[-1] == f"-1 {errno.ENOSYS}", r.stdout


async def test_workspace_stays_nosuid_nodev_after_restore(sandbox: Sandbox) -> None:
    """/workspace is bound nosuid,nodev; a restore mounts an overlay on the host's workspace, which reaches
    the sandbox by propagation with the host mount's flags: those are nosuid,nodev too."""
    await sandbox.write("kept.txt", "1")
    snap = await sandbox.snapshot()
    await sandbox.exec("echo 2 > dropped.txt")
    await sandbox.restore(snap)
    r = await sandbox.exec(["awk", '$5 == "/workspace" {print $6}', "/proc/self/mountinfo"])
    assert r.ok and r.stdout, r
    for options in r.stdout.split():
        assert {"nosuid", "nodev"} <= set(options.split(",")), r.stdout
