"""The seccomp program, run through a small classic-BPF interpreter for both architectures (the kernel
itself is exercised by tests/security on this machine's architecture)."""

from __future__ import annotations

import errno
import struct

import pytest

from trialground.sandbox.backends.bwrap import seccomp

EPERM = seccomp.RET_ERRNO | errno.EPERM
ENOSYS = seccomp.RET_ERRNO | errno.ENOSYS


def run_bpf(prog: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """Evaluate the filter on one `struct seccomp_data` (little-endian); returns the action."""
    assert len(prog) % 8 == 0 and len(prog) // 8 < 4096
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, *args)
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    acc, pc = 0, 0
    for _ in range(len(insns) + 1):
        code, jt, jf, k = insns[pc]
        if code == seccomp.LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (seccomp.JEQ, seccomp.JGE, seccomp.JSET):
            taken = {seccomp.JEQ: acc == k, seccomp.JGE: acc >= k, seccomp.JSET: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        elif code == seccomp.RET:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        assert pc < len(insns), "jump out of the program"
    raise AssertionError("the program does not terminate")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_refuses_dangerous_calls_and_allows_ordinary_ones(machine: str) -> None:
    arch, allowed, refused, checked = seccomp._ARCHES[machine]
    prog = seccomp.build_filter(machine)
    assert len(prog) // 8 < 300  # a binary search, not one comparison per call
    for name, nr in refused.items():
        assert run_bpf(prog, nr, arch) == EPERM, name
    for name, nr in allowed.items():
        if name not in checked:
            assert run_bpf(prog, nr, arch) == seccomp.RET_ALLOW, name
    table = seccomp.table(machine)
    for nr in range(max(table.values()) + 50):  # unlisted numbers: ENOSYS, as from an older kernel
        if nr not in set(allowed.values()) | set(refused.values()) | set(checked.values()):
            assert run_bpf(prog, nr, arch) == ENOSYS, nr
    for nr in (2**31 - 1, 2**32 - 1):  # -1 included
        assert run_bpf(prog, nr, arch) in (ENOSYS, seccomp.RET_KILL_PROCESS), nr
    clone = checked["clone"]
    assert run_bpf(prog, clone, arch, (0x01200011, 0, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # fork()
    assert run_bpf(prog, clone, arch, (0x003D0F00, 0, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # a thread
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x20000, 0x2000000, 0x4000000, 0x8000000):
        assert run_bpf(prog, clone, arch, (flag | 17, 0, 0, 0, 0, 0)) == EPERM, hex(flag)  # CLONE_NEW*
    assert run_bpf(prog, checked["clone3"], arch) == ENOSYS
    ioctl = checked["ioctl"]
    assert run_bpf(prog, ioctl, arch, (0, seccomp.TIOCSTI, 0, 0, 0, 0)) == EPERM
    assert run_bpf(prog, ioctl, arch, (0, seccomp.TIOCLINUX, 0, 0, 0, 0)) == EPERM
    assert run_bpf(prog, ioctl, arch, (0, 0x5401, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # TCGETS
    persona = checked["personality"]
    assert run_bpf(prog, persona, arch, (0xFFFFFFFF, 0, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # query
    assert run_bpf(prog, persona, arch, (0, 0, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # PER_LINUX
    assert run_bpf(prog, persona, arch, (0x0040000, 0, 0, 0, 0, 0)) == EPERM  # ADDR_NO_RANDOMIZE
    assert run_bpf(prog, persona, arch, (0x0400000, 0, 0, 0, 0, 0)) == EPERM  # READ_IMPLIES_EXEC
    # limits, priority and scheduling: the caller's own only (PID 1 outlives the command that would change it)
    for name, conditions in seccomp.SELF_ONLY.items():
        own = [0] * 6
        for arg, value in conditions:
            own[arg] = value
        assert run_bpf(prog, checked[name], arch, tuple(own)) == seccomp.RET_ALLOW, name
        for arg, value in conditions:
            other = list(own)
            other[arg] = value + 1  # pid 1, PRIO_PGRP, IOPRIO_WHO_PGRP
            assert run_bpf(prog, checked[name], arch, tuple(other)) == EPERM, (name, arg)
    prlimit, limit = checked["prlimit64"], 0x7FFC_0000_1000
    assert run_bpf(prog, prlimit, arch, (0, 7, limit, 0, 0, 0)) == seccomp.RET_ALLOW  # setrlimit's own
    assert run_bpf(prog, prlimit, arch, (1, 7, 0, limit, 0, 0)) == seccomp.RET_ALLOW  # reading PID 1's
    assert run_bpf(prog, prlimit, arch, (1, 7, limit, 0, 0, 0)) == EPERM  # setting PID 1's
    assert run_bpf(prog, prlimit, arch, (1, 7, 1 << 32, 0, 0, 0)) == EPERM  # a pointer in the high word


def test_the_current_syscall_table_is_covered() -> None:
    """The calls added to Linux since 5.x that a sandbox must not have are refused by name, and every
    name the tables know has a policy (allowed, refused, argument-checked or deliberately ENOSYS)."""
    _arch, allowed, refused, checked = seccomp._ARCHES["x86_64"]
    for name in (
        "pidfd_getfd", "process_madvise", "process_mrelease", "process_vm_readv", "process_vm_writev",
        "kcmp", "open_by_handle_at", "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf",
        "userfaultfd", "perf_event_open", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount",
        "open_tree", "open_tree_attr", "mount_setattr", "keyctl", "add_key", "request_key", "setns",
        "unshare", "quotactl_fd", "statmount", "listmount", "memfd_secret", "modify_ldt",
    ):  # fmt: skip
        assert name in refused, name
    ensosys = {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "lsm_get_self_attr",
               "lsm_set_self_attr", "lsm_list_modules"}  # fmt: skip
    for name in seccomp.table("x86_64"):
        assert name in allowed or name in refused or name in checked or name in ensosys, name


def test_foreign_architecture_and_x32_are_killed() -> None:
    prog = seccomp.build_filter("x86_64")
    assert run_bpf(prog, 0, 0x40000003) == seccomp.RET_KILL_PROCESS  # i386 entry point
    assert run_bpf(prog, 0x40000000 | 101, seccomp.AUDIT_ARCH_X86_64) == seccomp.RET_KILL_PROCESS
    assert run_bpf(prog, 0x40000000 | 0, seccomp.AUDIT_ARCH_X86_64) == seccomp.RET_KILL_PROCESS  # x32 read
    assert run_bpf(seccomp.build_filter("aarch64"), 63, seccomp.AUDIT_ARCH_X86_64) == seccomp.RET_KILL_PROCESS
    assert run_bpf(seccomp.build_filter("aarch64"), 63, 0x40000028) == seccomp.RET_KILL_PROCESS  # arm32


def test_unknown_architecture_is_an_error() -> None:
    with pytest.raises(ValueError):
        seccomp.build_filter("sparc64")
