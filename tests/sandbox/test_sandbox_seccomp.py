"""The seccomp program, run through a small classic-BPF interpreter for both architectures (the kernel
itself is exercised by tests/security on this machine's architecture)."""

from __future__ import annotations

import errno
import struct

import pytest

from trialground.sandbox import seccomp

EPERM = seccomp.RET_ERRNO | errno.EPERM


def run_bpf(prog: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """Evaluate the filter on one `struct seccomp_data` (little-endian); returns the action."""
    assert len(prog) % 8 == 0 and len(prog) // 8 < 4096
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
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
    arch, blocked, special = seccomp._ARCHES[machine]
    prog = seccomp.build_filter(machine)
    for name, nr in blocked.items():
        assert run_bpf(prog, nr, arch) == EPERM, name
    ordinary = {"x86_64": [0, 1, 2, 9, 59, 231], "aarch64": [63, 64, 56, 222, 221, 94]}[machine]
    for nr in ordinary:  # read, write, open(at), mmap, execve, exit_group
        assert run_bpf(prog, nr, arch) == seccomp.RET_ALLOW, nr
    clone = special["clone"]
    assert run_bpf(prog, clone, arch, (0x01200011, 0, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # fork()
    assert run_bpf(prog, clone, arch, (0x10000000 | 17, 0, 0, 0, 0, 0)) == EPERM  # CLONE_NEWUSER
    assert run_bpf(prog, clone, arch, (0x20000000, 0, 0, 0, 0, 0)) == EPERM  # CLONE_NEWPID
    assert run_bpf(prog, special["clone3"], arch) == seccomp.RET_ERRNO | errno.ENOSYS
    ioctl = special["ioctl"]
    assert run_bpf(prog, ioctl, arch, (0, seccomp.TIOCSTI, 0, 0, 0, 0)) == EPERM
    assert run_bpf(prog, ioctl, arch, (0, 0x5401, 0, 0, 0, 0)) == seccomp.RET_ALLOW  # TCGETS


def test_foreign_architecture_and_x32_are_killed() -> None:
    prog = seccomp.build_filter("x86_64")
    assert run_bpf(prog, 0, 0x40000003) == seccomp.RET_KILL_PROCESS  # i386 entry point
    assert run_bpf(prog, 0x40000000 | 101, seccomp.AUDIT_ARCH_X86_64) == seccomp.RET_KILL_PROCESS
    assert run_bpf(seccomp.build_filter("aarch64"), 63, seccomp.AUDIT_ARCH_X86_64) == seccomp.RET_KILL_PROCESS


def test_unknown_architecture_is_an_error() -> None:
    with pytest.raises(ValueError):
        seccomp.build_filter("sparc64")
