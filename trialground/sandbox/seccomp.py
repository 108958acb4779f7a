"""A seccomp filter (classic BPF, assembled here, no libseccomp) that refuses dangerous system calls.

Refused with EPERM: ptrace and cross-process memory access, mount and the new mount API, pivot_root,
chroot, bpf, perf_event_open, keyctl/add_key/request_key, kernel modules, reboot, kexec, io_uring,
unshare, setns, clone with any CLONE_NEW* flag, userfaultfd, handle-based opens, swap, clock and quota
calls, and the TIOCSTI/TIOCLINUX ioctls (typing into a terminal). `clone3` gets ENOSYS so that libc falls
back to `clone`, whose flags the filter can see. A call from another architecture (32-bit or x32 entry
points) kills the process. bubblewrap loads the program with `--seccomp FD`; the fork server's template
(`template.py`) with prctl(PR_SET_SECCOMP).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

LD_W_ABS = 0x20
JEQ = 0x15
JGE = 0x35
JSET = 0x45
RET = 0x06

CLONE_NEW_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

# (name -> number) per architecture; names are what the docstring promises.
_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169, "kexec_load": 246,
    "kexec_file_load": 320, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "unshare": 272, "setns": 308, "userfaultfd": 323, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227,
    "clock_adjtime": 305, "adjtimex": 159, "quotactl": 179, "syslog": 103, "vhangup": 153, "iopl": 172,
    "ioperm": 173, "fanotify_init": 300, "lookup_dcookie": 212,
}  # fmt: skip
_AARCH64 = {
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
    "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "bpf": 280, "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
    "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142, "kexec_load": 104,
    "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "unshare": 97, "setns": 268, "userfaultfd": 282, "open_by_handle_at": 265, "name_to_handle_at": 264,
    "swapon": 224, "swapoff": 225, "acct": 89, "settimeofday": 170, "clock_settime": 112,
    "clock_adjtime": 266, "adjtimex": 171, "quotactl": 60, "syslog": 116, "vhangup": 58,
    "fanotify_init": 262, "lookup_dcookie": 18,
}  # fmt: skip
_ARCHES = {
    "x86_64": (AUDIT_ARCH_X86_64, _X86_64, {"clone": 56, "clone3": 435, "ioctl": 16}),
    "aarch64": (AUDIT_ARCH_AARCH64, _AARCH64, {"clone": 220, "clone3": 435, "ioctl": 29}),
}
_ARCHES["arm64"] = _ARCHES["aarch64"]
_ARCHES["amd64"] = _ARCHES["x86_64"]


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _arg_lo(i: int) -> int:
    return 16 + 8 * i  # offsetof(struct seccomp_data, args[i]); low word on little-endian machines


def build_filter(machine: str | None = None) -> bytes:
    """The BPF program (an array of `struct sock_filter`) for this machine's architecture."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise ValueError(f"no seccomp filter for architecture {machine!r}")
    arch, blocked, special = _ARCHES[machine]
    eperm = RET_ERRNO | errno.EPERM
    prog = [_insn(LD_W_ABS, 4), _insn(JEQ, arch, jt=1), _insn(RET, RET_KILL_PROCESS), _insn(LD_W_ABS, 0)]
    if arch == AUDIT_ARCH_X86_64:
        prog += [_insn(JGE, X32_SYSCALL_BIT, jf=1), _insn(RET, RET_KILL_PROCESS)]
    for nr in sorted(set(blocked.values())):
        prog += [_insn(JEQ, nr, jf=1), _insn(RET, eperm)]
    prog += [_insn(JEQ, special["clone3"], jf=1), _insn(RET, RET_ERRNO | errno.ENOSYS)]
    prog += [
        _insn(JEQ, special["clone"], jf=4),
        _insn(LD_W_ABS, _arg_lo(0)),
        _insn(JSET, CLONE_NEW_FLAGS, jf=1),
        _insn(RET, eperm),
        _insn(RET, RET_ALLOW),
    ]
    prog += [
        _insn(JEQ, special["ioctl"], jf=5),
        _insn(LD_W_ABS, _arg_lo(1)),
        _insn(JEQ, TIOCSTI, jt=2),
        _insn(JEQ, TIOCLINUX, jt=1),
        _insn(RET, RET_ALLOW),
        _insn(RET, eperm),
        _insn(RET, RET_ALLOW),
    ]
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
