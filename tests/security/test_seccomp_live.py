"""The seccomp allowlist in real sandboxes of both launchers: each dangerous call is refused from inside
(raw syscall numbers through ctypes, so no libc wrapper can hide a call), calls newer than the table get
ENOSYS, and ordinary programs still work."""

from __future__ import annotations

import errno
import platform

import pytest

from trialground.sandbox.backends.bwrap import seccomp
from trialground.sandbox.base import ExecStatus, Sandbox

pytestmark = pytest.mark.security
NR = seccomp.table()
PROBE = (
    "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    "for nr in map(int, sys.argv[1:]):\n"
    "    ctypes.set_errno(0)\n"
    "    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(0)] * 6)\n"
    "    print(nr, r, ctypes.get_errno())\n"
)
REFUSED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    "process_mrelease", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr", "bpf", "perf_event_open", "keyctl",
    "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "unshare", "setns", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "open_by_handle_at", "name_to_handle_at", "swapon", "acct", "settimeofday", "clock_settime",
    "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm", "modify_ldt", "fanotify_init", "sethostname",
    "move_pages", "migrate_pages", "memfd_secret", "statmount", "listmount",
)  # fmt: skip


def _run(argv: list[str]) -> list[str]:
    return ["python3", "-I", "-S", "-c", PROBE, *argv]


async def test_every_refused_call_is_eperm_inside(sandbox: Sandbox) -> None:
    numbers = [NR[name] for name in REFUSED if name in NR]
    r = await sandbox.exec(_run([str(n) for n in numbers]))
    assert r.ok, r
    rows = (line.split() for line in r.stdout.splitlines())
    seen = {int(nr): (int(ret), int(err)) for nr, ret, err in rows}
    by_number = {nr: name for name, nr in NR.items()}
    for nr in numbers:
        assert seen[nr] == (-1, errno.EPERM), (by_number[nr], seen[nr])


async def test_calls_newer_than_the_table_are_enosys_and_clone3_falls_back(sandbox: Sandbox) -> None:
    newest = max(NR.values())
    unknown = [newest + 1, newest + 7, 1000, 0x3FFFFFFF]
    r = await sandbox.exec(_run([str(n) for n in [*unknown, NR["clone3"]]]))
    assert r.ok, r
    for line in r.stdout.splitlines():
        _nr, ret, err = map(int, line.split())
        assert (ret, err) == (-1, errno.ENOSYS), line


async def test_ordinary_programs_still_work(sandbox: Sandbox) -> None:
    """Python (threads, asyncio, subprocess, multiprocessing within the pids limit), bash pipelines and
    coreutils under the allowlist."""
    script = r"""
import asyncio, multiprocessing, os, subprocess, sys, tempfile, threading, socket, select, mmap, signal
results = []
t = [threading.Thread(target=results.append, args=(i,)) for i in range(8)]
[x.start() for x in t]; [x.join() for x in t]
assert sorted(results) == list(range(8))
async def main():
    p = await asyncio.create_subprocess_exec("echo", "async", stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    r, w = socket.socketpair(); w.send(b"x"); assert r.recv(1) == b"x"
    return out
assert asyncio.run(main()) == b"async\n"
assert subprocess.run(["sh", "-c", "echo sub | tr a-z A-Z"], capture_output=True).stdout == b"SUB\n"
with multiprocessing.Pool(3) as pool:
    assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]
with tempfile.NamedTemporaryFile(dir="/tmp") as f:
    f.write(b"abc" * 1000); f.flush(); m = mmap.mmap(f.fileno(), 0); assert m[:3] == b"abc"
signal.signal(signal.SIGUSR1, lambda *a: results.append("sig")); os.kill(os.getpid(), signal.SIGUSR1)
assert "sig" in results
os.mkfifo("/tmp/fifo"); os.unlink("/tmp/fifo")
print("python ok")
"""
    r = await sandbox.exec(["python3", "-c", script])
    assert r.ok and r.stdout == "python ok\n", r
    r = await sandbox.exec(
        "set -e; seq 1 2000 | sort -rn | head -3 | tr '\\n' ' '; echo; "
        "mkdir -p d/e && echo hi > d/e/f && cp -r d g && find g -type f | xargs cat; "
        "ls -la g >/dev/null; stat g/e/f >/dev/null; du -s g >/dev/null; date >/dev/null; "
        "tar czf /tmp/a.tgz g && tar tzf /tmp/a.tgz | wc -l; sleep 0.1 & wait; "
        "cat <(echo substituted); uname -s; id -u; mv g h; rm -rf d h; touch -d 2020-01-01 t; "
        "chmod 600 t; ln -s t u; readlink u; timeout 5 true; nproc >/dev/null; ps -e >/dev/null 2>&1 || true"
    )
    assert r.ok, r
    assert r.stdout.split("\n")[:5] == ["2000 1999 1998 ", "hi", "3", "substituted", "Linux"], r.stdout


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x32 ABI is x86_64's")
async def test_x32_calls_kill_the_process(sandbox: Sandbox) -> None:
    r = await sandbox.exec(_run([str(0x40000000 | NR["getpid"])]))
    assert r.status is ExecStatus.KILLED and r.signal == 31, r  # SIGSYS: SECCOMP_RET_KILL_PROCESS


I386_GETPID = (
    "import ctypes, mmap\n"
    "code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (i386 getpid); int 0x80; ret\n"
    "buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    "buf.write(code)\n"
    "addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))\n"
    "print('calling', flush=True)\n"
    "print('returned', ctypes.CFUNCTYPE(ctypes.c_int)(addr)())\n"
)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 entry point is x86_64's")
async def test_i386_entry_point_kills_the_process(sandbox: Sandbox) -> None:
    """`int 0x80` reaches the 32-bit system call table (another audit architecture): the filter kills."""
    r = await sandbox.exec(["python3", "-I", "-S", "-c", I386_GETPID])
    assert r.stdout == "calling\n" and r.status is ExecStatus.KILLED and r.signal == 31, r


# Each call on PID 1 (the sandbox's supervisor, which outlives every occupant and forks every command) and
# the same call on the caller itself; the first must be EPERM, the second work. Raw numbers, real arguments.
SELF_ONLY = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
lim = (ctypes.c_uint64 * 2)(0, 0)
old = (ctypes.c_uint64 * 2)()
param = ctypes.c_int(0)
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
for target in (1, 0):
    print(target, "prlimit64", call("prlimit64", target, 4, ctypes.byref(lim), None))
    print(target, "prlimit64_read", call("prlimit64", target, 4, None, ctypes.byref(old)))
    print(target, "setpriority", call("setpriority", 0, target, 5))
    print(target, "setpriority_user", call("setpriority", 2, target, 5))
    print(target, "sched_setscheduler", call("sched_setscheduler", target, 3, ctypes.byref(param)))
    print(target, "sched_setparam", call("sched_setparam", target, ctypes.byref(param)))
    print(target, "ioprio_set", call("ioprio_set", 1, target, (2 << 13) | 4))
"""


async def test_limits_priority_and_policy_change_only_the_callers_own(sandbox: Sandbox) -> None:
    source = f"NR = {dict(NR)!r}\n" + SELF_ONLY
    r = await sandbox.exec(["python3", "-I", "-S", "-c", source])
    assert r.ok, r
    seen = {
        (int(t), name): result for t, name, result in (line.split(" ", 2) for line in r.stdout.splitlines())
    }
    for name in (
        "prlimit64",
        "setpriority",
        "setpriority_user",
        "sched_setscheduler",
        "sched_setparam",
        "ioprio_set",
    ):
        assert seen[(1, name)] == "Operation not permitted", (name, seen)
    assert seen[(1, "prlimit64_read")] == "ok"  # reading another's limits is harmless
    for name in (
        "prlimit64",
        "prlimit64_read",
        "setpriority",
        "sched_setscheduler",
        "sched_setparam",
        "ioprio_set",
    ):
        assert seen[(0, name)] == "ok", (name, seen)
    assert seen[(0, "setpriority_user")] == "Operation not permitted"  # every process of the uid: PID 1 too
