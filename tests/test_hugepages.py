"""Huge pages for the heap of CPU training processes: when a process re-executes itself, and that the
re-executed process really gets 2 MB pages from the kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trialground.hugepages import (
    DONE,
    KEEP_FREED,
    OPT_OUT,
    hugepage_env,
    hugepage_reason,
    thp_mode,
    tunable_value,
)

GLIBC = ("glibc", "2.36")


def test_reasons_not_to_reexecute() -> None:
    assert hugepage_reason({}, GLIBC, "madvise") is None
    assert hugepage_reason({}, GLIBC, "always") is None
    assert hugepage_reason({OPT_OUT: "1"}, GLIBC, "madvise") is None
    assert hugepage_reason({OPT_OUT: "0"}, GLIBC, "madvise") == f"{OPT_OUT}=0"
    assert hugepage_reason({OPT_OUT: "off"}, GLIBC, "madvise") == f"{OPT_OUT}=off"
    assert "never" in str(hugepage_reason({}, GLIBC, "never"))
    assert "not available" in str(hugepage_reason({}, GLIBC, None))
    assert "2.35" in str(hugepage_reason({}, ("glibc", "2.31"), "madvise"))
    assert "not glibc" in str(hugepage_reason({}, ("", ""), "madvise"))  # musl: platform.libc_ver() is empty
    assert "unreadable" in str(hugepage_reason({}, ("glibc", "x"), "madvise"))
    # a process that was re-executed and still lacks the tunable (glibc dropped it) does not loop
    assert "already re-executed" in str(hugepage_reason({DONE: "1"}, GLIBC, "madvise"))
    # a choice the user made is kept, whichever it is
    chosen = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    assert hugepage_reason(chosen, GLIBC, "madvise") == "GLIBC_TUNABLES sets glibc.malloc.hugetlb=0"


def test_the_tunables_join_the_ones_already_set() -> None:
    keep = ":".join(f"{name}={value}" for name, value in KEEP_FREED)
    expected = {"A": "b", "GLIBC_TUNABLES": f"glibc.malloc.hugetlb=1:{keep}", DONE: "1"}
    assert hugepage_env({"A": "b"}) == expected
    env = hugepage_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1:{keep}"
    assert tunable_value(env) == "1"
    assert tunable_value(env, "glibc.malloc.trim_threshold") == str(1 << 40)
    # a keep-freed tunable the user set keeps the user's value
    env = hugepage_env({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000"})
    assert env["GLIBC_TUNABLES"].count("trim_threshold") == 1
    assert tunable_value(env, "glibc.malloc.trim_threshold") == "1000"
    assert tunable_value(env, "glibc.malloc.mmap_threshold") == str(32 << 20)
    assert tunable_value({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0"}) == "0"
    assert tunable_value({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) is None


def test_thp_mode_reads_the_bracketed_word(tmp_path: Path) -> None:
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert thp_mode(f) == "madvise"
    f.write_text("[never]\n")
    assert thp_mode(f) == "never"
    assert thp_mode(tmp_path / "missing") is None


# The child re-executes itself, then touches 64 MB of freshly allocated tensor memory and reports what its
# heap runs on and how much of its memory the kernel backs with huge pages.
CHILD = """
import torch
from trialground.hugepages import heap_pages, reexec_with_hugepages
reexec_with_hugepages()
x = torch.ones(64 * 1024 * 1024 // 4)
huge = [line.split()[1] for line in open('/proc/self/smaps_rollup') if line.startswith('AnonHugePages')]
print(heap_pages(), int(huge[0]) if huge else -1)
"""


def _child(env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    pages, huge_kb = out.stdout.strip().splitlines()[-1].rsplit(maxsplit=1)
    return pages, int(huge_kb)


def test_a_reexecuted_process_gets_huge_pages_and_the_opt_out_keeps_small_ones() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT, DONE)}
    reason = hugepage_reason(env)
    if reason is not None:
        pytest.skip(f"this machine cannot give the heap huge pages: {reason}")
    pages, huge_kb = _child(env)
    assert pages == "2MB"
    assert huge_kb >= 32 * 1024, f"{huge_kb} kB of huge pages after touching 64 MB"
    pages, huge_kb = _child({**env, OPT_OUT: "0"})
    assert pages == f"4KB ({OPT_OUT}=0)"
    if thp_mode() == "madvise":  # in `always` mode the kernel gives huge pages unasked
        assert huge_kb < 32 * 1024


# The child allocates and touches 16 MB tensors (64 MB in all), frees them, and reports how much of that its
# resident memory still holds.
KEEPER = """
import torch
from trialground.hugepages import reexec_with_hugepages
reexec_with_hugepages()
def resident():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
before = resident()
xs = [torch.ones(4 * 1024 * 1024) for _ in range(4)]
del xs
print(resident() - before)
"""


def _kept(env: dict[str, str]) -> int:
    out = subprocess.run([sys.executable, "-c", KEEPER], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip().splitlines()[-1])


def test_a_reexecuted_process_keeps_the_memory_it_freed() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT, DONE)}
    reason = hugepage_reason(env)
    if reason is not None:
        pytest.skip(f"this machine re-executes nothing: {reason}")
    mb = 1024 * 1024
    assert _kept(env) >= 60 * mb  # the heap kept the four freed chunks
    assert _kept({**env, OPT_OUT: "0"}) < 16 * mb  # glibc's defaults: 16 MB chunks are unmapped when freed
