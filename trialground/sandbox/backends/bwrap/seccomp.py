"""A seccomp filter (classic BPF, assembled here, no libseccomp): an allowlist of system calls.

What is allowed, what is refused and why: `syscalls.py`. In short, the calls ordinary programs make are
allowed; calls that reach kernel attack surface or other processes (ptrace and cross-process memory or
descriptor access, mount and the new mount API, pivot_root, chroot, bpf, perf_event_open, keys, modules,
reboot, kexec, io_uring, unshare, setns, userfaultfd, handle-based opens, swap, clock and quota calls, ...)
get EPERM; every other number, including calls newer than the table, gets ENOSYS (as from an older kernel).
Arguments are checked for these calls: `clone` with any CLONE_NEW* flag is EPERM (`clone3` is ENOSYS, so
that libc falls back to `clone`, whose flags the filter can see), `ioctl` TIOCSTI/TIOCLINUX (typing into a
terminal) is EPERM, `personality` may only query or set the default persona, and the calls that change a
process's limits, priority or scheduling may change only the caller's own (`SELF_ONLY`; `prlimit64` may
still read another's limits). Every process of a sandbox has one uid, PID 1 included, and PID 1 outlives
its occupants: a limit lowered on it, which it cannot raise back, would reach every later command. A call
from another architecture (the 32-bit entry points) or through the x32 ABI kills the process.

The program checks the few argument-checked calls first, then finds the call's number by binary search over
ranges of numbers with one action (~9 comparisons), so that its cost does not grow with the table.
bubblewrap loads the program with `--seccomp FD`; the fork server's template (`template.py`) with
prctl(PR_SET_SECCOMP).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

from trialground.sandbox.backends.bwrap import syscalls

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
RET_EPERM = RET_ERRNO | errno.EPERM
RET_ENOSYS = RET_ERRNO | errno.ENOSYS

LD_W_ABS = 0x20
JEQ = 0x15
JGE = 0x35
JSET = 0x45
RET = 0x06

CLONE_NEW_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
# personality(): query (0xffffffff), PER_LINUX, PER_LINUX32, UNAME26 and both; never ADDR_NO_RANDOMIZE,
# READ_IMPLIES_EXEC and the like.
PERSONAS = (0xFFFFFFFF, 0x0, 0x8, 0x20000, 0x20008)
# Calls allowed only on the caller itself: (argument index, value) pairs that must all hold, else EPERM
# (the caller is pid 0, or PRIO_PROCESS / IOPRIO_WHO_PROCESS with who 0). `prlimit64` is checked apart.
SELF_ONLY = {
    "setpriority": ((0, 0), (1, 0)),
    "ioprio_set": ((0, 1), (1, 0)),
    "sched_setscheduler": ((0, 0),),
    "sched_setparam": ((0, 0),),
    "sched_setattr": ((0, 0),),
}
ARG_CHECKED = ("clone", "clone3", "ioctl", "personality", "prlimit64", *SELF_ONLY)


def _policy(table: dict[str, int]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(allowed, refused, argument-checked) name -> number, for the names `table` has."""

    def pick(names: list[str] | tuple[str, ...]) -> dict[str, int]:
        return {name: table[name] for name in names if name in table}

    return pick(syscalls.ALLOWED), pick(syscalls.REFUSED), pick(ARG_CHECKED)


# machine -> (audit arch, allowed, refused, argument-checked), each name -> number
_ARCHES = {
    "x86_64": (AUDIT_ARCH_X86_64, *_policy(syscalls.X86_64)),
    "aarch64": (AUDIT_ARCH_AARCH64, *_policy(syscalls.AARCH64)),
}
_ARCHES["arm64"] = _ARCHES["aarch64"]
_ARCHES["amd64"] = _ARCHES["x86_64"]


def table(machine: str | None = None) -> dict[str, int]:
    """Every system call number the filter knows for `machine` (default: this one), by name."""
    machine = machine or platform.machine()
    return {"x86_64": syscalls.X86_64, "amd64": syscalls.X86_64}.get(machine, syscalls.AARCH64)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _arg_lo(i: int) -> int:
    return 16 + 8 * i  # offsetof(struct seccomp_data, args[i]); low word on little-endian machines


def _arg_hi(i: int) -> int:
    return _arg_lo(i) + 4


def _self_only(nr: int, conditions: tuple[tuple[int, int], ...]) -> list[bytes]:
    """Allowed when every (argument, value) holds, else EPERM; other calls fall through untouched."""
    size = 1 + 2 * len(conditions) + 2
    out = [_insn(JEQ, nr, jf=size - 1)]
    for i, (arg, value) in enumerate(conditions):
        out += [_insn(LD_W_ABS, _arg_lo(arg)), _insn(JEQ, value, jf=size - 1 - (2 + 2 * i) - 1)]
    return [*out, _insn(RET, RET_ALLOW), _insn(RET, RET_EPERM)]


def _prlimit(nr: int) -> list[bytes]:
    """prlimit64(pid, resource, new, old): allowed on the caller (pid 0) or without a new limit."""
    return [
        _insn(JEQ, nr, jf=8),
        _insn(LD_W_ABS, _arg_lo(0)),
        _insn(JEQ, 0, jt=4),
        _insn(LD_W_ABS, _arg_lo(2)),
        _insn(JEQ, 0, jf=3),
        _insn(LD_W_ABS, _arg_hi(2)),
        _insn(JEQ, 0, jf=1),
        _insn(RET, RET_ALLOW),
        _insn(RET, RET_EPERM),
    ]


def _ranges(allowed: dict[str, int], refused: dict[str, int]) -> list[tuple[int, int]]:
    """(first number, action) of consecutive runs with one action, from 0 up; past the last, ENOSYS."""
    action = {nr: RET_ALLOW for nr in allowed.values()} | {nr: RET_EPERM for nr in refused.values()}
    runs: list[tuple[int, int]] = []
    for nr in range(max(action) + 2):
        act = action.get(nr, RET_ENOSYS)
        if not runs or runs[-1][1] != act:
            runs.append((nr, act))
    return runs


def _search(runs: list[tuple[int, int]]) -> list[bytes]:
    """Binary search over `runs` on the number in the accumulator, ending in each run's action."""
    if len(runs) == 1:
        return [_insn(RET, runs[0][1])]
    mid = len(runs) // 2
    above, below = _search(runs[mid:]), _search(runs[:mid])
    if len(above) > 255:
        raise ValueError("seccomp program too large for one jump")
    return [_insn(JGE, runs[mid][0], jt=0, jf=len(above)), *above, *below]


def build_filter(machine: str | None = None) -> bytes:
    """The BPF program (an array of `struct sock_filter`) for this machine's architecture."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise ValueError(f"no seccomp filter for architecture {machine!r}")
    arch, allowed, refused, checked = _ARCHES[machine]
    prog = [_insn(LD_W_ABS, 4), _insn(JEQ, arch, jt=1), _insn(RET, RET_KILL_PROCESS), _insn(LD_W_ABS, 0)]
    if arch == AUDIT_ARCH_X86_64:
        prog += [_insn(JGE, X32_SYSCALL_BIT, jf=1), _insn(RET, RET_KILL_PROCESS)]
    prog += [_insn(JEQ, checked["clone3"], jf=1), _insn(RET, RET_ENOSYS)]
    prog += [
        _insn(JEQ, checked["clone"], jf=4),
        _insn(LD_W_ABS, _arg_lo(0)),
        _insn(JSET, CLONE_NEW_FLAGS, jf=1),
        _insn(RET, RET_EPERM),
        _insn(RET, RET_ALLOW),
    ]
    prog += [
        _insn(JEQ, checked["ioctl"], jf=5),
        _insn(LD_W_ABS, _arg_lo(1)),
        _insn(JEQ, TIOCSTI, jt=2),
        _insn(JEQ, TIOCLINUX, jt=1),
        _insn(RET, RET_ALLOW),
        _insn(RET, RET_EPERM),
    ]
    n = len(PERSONAS)
    prog += [_insn(JEQ, checked["personality"], jf=n + 3), _insn(LD_W_ABS, _arg_lo(0))]
    prog += [_insn(JEQ, persona, jt=n - i) for i, persona in enumerate(PERSONAS)]
    prog += [_insn(RET, RET_EPERM), _insn(RET, RET_ALLOW)]
    prog += _prlimit(checked["prlimit64"])
    for name, conditions in SELF_ONLY.items():
        prog += _self_only(checked[name], conditions)
    # The accumulator holds the number again on every path that reaches the search (the argument loads
    # above all end in a return).
    prog += _search(_ranges(allowed, refused))
    return b"".join(prog)


_CACHE: dict[str, bytes] = {}


def program() -> bytes:
    """This machine's program, built once."""
    machine = platform.machine()
    if machine not in _CACHE:
        _CACHE[machine] = build_filter(machine)
    return _CACHE[machine]


def filter_fd() -> int:
    """A fresh readable fd holding the program, positioned at its start (bubblewrap reads and closes it)."""
    fd = os.memfd_create("trialground-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
