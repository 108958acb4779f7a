"""2 MB pages for the C allocator's heap in CPU training processes, and a heap that keeps what it freed.

A CPU training step allocates gigabytes of activations and gradients. With 4 KB pages each first touch is
a page fault, and on the 2-core virtual machine docs/benchmarks.md was measured on a fault costs ~19 us:
the first update of a 106M-parameter model (64 GRPO samples in one micro-batch, bf16) took 54.9 s, 34.8 s
of it in the kernel (1.79M faults). glibc (2.35 and later) can ask for transparent huge pages for its heap
and its mmapped chunks (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`): the same update then took 35.1 s with
3,227 faults; the three later updates took 17.8-23.4 s against 18.5-20.3 s (docs/benchmarks.md).

Fresh memory stays expensive even with huge pages where the machine is a virtual machine that hands free
guest memory back to its host (free page reporting, virtio-balloon): touching a page the host has taken
back faults on the host too. On that 2-core machine the first touch of 2 GB took 7.5 s, touching 2 GB
again right after unmapping it 0.2 s. glibc returns freed memory to the kernel (it trims the top of its
heap past 128 KB of free space and unmaps chunks past a threshold that adapts up to 32 MB), so later
updates fault part of their memory in again. The re-executed process also keeps what it frees
(`KEEP_FREED`: no trimming, chunks up to 32 MB from the heap, the heap grown 256 MB at a time): the three
updates of a 106M model with 64 samples in one micro-batch took 35.5 / 22.3 / 17.7 s against 37.2 / 25.9 /
19.1 s, 17.0 / 4.5 / 0.0 s of them in the kernel against 18.6 / 8.2 / 1.6 s; with micro-batches of 16 (the
trainer's default) the difference is within noise (docs/benchmarks.md). The cost is resident memory that
stays at the process's peak.

glibc reads tunables once, when the process starts, so `trialground train` and `trialground eval` re-execute
themselves with the tunable set before doing anything else (`reexec_with_hugepages`); processes they start
inherit it (sandboxes do not: their environment is built from scratch). `TRIALGROUND_HUGEPAGES=0` turns it
off. Nothing is re-executed where it cannot work: another C library, glibc older than 2.35, transparent huge
pages set to `never`, or a huge-page tunable the user already chose (a `KEEP_FREED` tunable the user set
keeps the user's value).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

TUNABLE = "glibc.malloc.hugetlb"
OPT_OUT = "TRIALGROUND_HUGEPAGES"
# set in the re-executed process: never re-execute twice (a process that runs in secure mode, e.g. with file
# capabilities, has GLIBC_TUNABLES removed by glibc and would otherwise re-execute itself forever)
DONE = "TRIALGROUND_HUGEPAGES_REEXECUTED"
# glibc.malloc.* tunables that keep freed memory in the process (see the module's docstring): never trim
# the heap's top, serve chunks up to 32 MB (mmap_threshold's maximum on 64-bit) from the heap, which also
# stops the threshold from adapting, and grow the heap 256 MB at a time
KEEP_FREED = (
    ("glibc.malloc.trim_threshold", str(1 << 40)),
    ("glibc.malloc.mmap_threshold", str(32 << 20)),
    ("glibc.malloc.top_pad", str(256 << 20)),
)
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(path: Path = THP_MODE) -> str | None:
    """The kernel's transparent huge page mode (`always`, `madvise`, `never`), None where it has none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def hugepage_reason(
    env: Mapping[str, str] | None = None,
    libc: tuple[str, str] | None = None,
    mode: str | None = "",
) -> str | None:
    """Why the heap would not get huge pages from a re-execution (None: it would).

    `env`, `libc` and `mode` default to this process's environment, C library and the kernel's mode."""
    env = os.environ if env is None else env
    if env.get(OPT_OUT, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{OPT_OUT}={env[OPT_OUT]}"
    if env.get(DONE):
        return "already re-executed once (GLIBC_TUNABLES did not reach this process)"
    if tunable_value(env) is not None:
        return f"GLIBC_TUNABLES sets {TUNABLE}={tunable_value(env)}"
    if not sys.platform.startswith("linux"):
        return f"platform {sys.platform}"
    name, version = platform.libc_ver() if libc is None else libc
    if name != "glibc":
        return f"C library {name or 'unknown'}, not glibc"
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return f"glibc version {version!r} unreadable"
    if (major, minor) < (2, 35):
        return f"glibc {version} has no {TUNABLE} (2.35+)"
    mode = thp_mode() if mode == "" else mode
    if mode not in ("always", "madvise"):
        return f"transparent huge pages: {mode or 'not available'}"
    return None


def tunable_value(env: Mapping[str, str], name: str = TUNABLE) -> str | None:
    """The value GLIBC_TUNABLES gives tunable `name` (the last one wins, as in glibc), None if unset."""
    value = None
    for item in env.get("GLIBC_TUNABLES", "").split(":"):
        key, _, val = item.partition("=")
        if key == name:
            value = val
    return value


def hugepage_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the huge-page tunable and the `KEEP_FREED` ones the user did not set added to whatever
    GLIBC_TUNABLES already holds."""
    added = [f"{TUNABLE}=1"]
    added += [f"{name}={value}" for name, value in KEEP_FREED if tunable_value(env, name) is None]
    tunables = ":".join([env["GLIBC_TUNABLES"], *added] if env.get("GLIBC_TUNABLES") else added)
    return {**env, "GLIBC_TUNABLES": tunables, DONE: "1"}


def reexec_with_hugepages() -> None:
    """Replace this process by itself (the interpreter's own command line, `sys.orig_argv`) with huge pages
    for its heap, or return where that is not possible (see `hugepage_reason`). Call it first thing in a
    process's entry point: the process starts over."""
    reason = hugepage_reason()
    if reason is not None:
        log.debug("allocator: 4 KB pages (%s)", reason)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(sys.orig_argv), hugepage_env(os.environ))


def heap_hugepages() -> bool:
    """Whether this process's heap asks for huge pages (GLIBC_TUNABLES set the tunable when it started)."""
    return tunable_value(os.environ) in ("1", "2")


def heap_pages() -> str:
    """What this process's heap runs on, for a log line: `2MB` or `4KB (reason)`."""
    return "2MB" if heap_hugepages() else f"4KB ({hugepage_reason() or 'not re-executed'})"
