"""Real bubblewrap sandboxes with small limits."""

from __future__ import annotations

import os
import resource
from collections.abc import AsyncIterator, Iterator

import pytest

from trialground.pool.backend import reserve_open_files
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
SMALL = Limits(wall_s=10, cpu_s=10, memory_mb=128, pids=32, disk_mb=32, output_bytes=64 * 1024)


@pytest.fixture
def config() -> SandboxConfig:
    return SandboxConfig(limits=SMALL)


@pytest.fixture
async def sandbox(config: SandboxConfig) -> AsyncIterator[Sandbox]:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    sb = await open_sandbox(config)
    try:
        yield sb
    finally:
        await sb.close()


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """This process holds > 1024 descriptors, as a busy trainer (sockets, files, CUDA) may."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip("needs RLIMIT_NOFILE >= 1400")
    if soft != resource.RLIM_INFINITY and soft < 1400:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1400, hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def room_for_200_sandboxes() -> Iterator[None]:
    """Descriptors for 200 open sandboxes, made as a pool makes them (`reserve_open_files`): a host's soft
    limit of 1,024 does not hold 200 of them with their cgroup locks."""
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    reserve_open_files(200)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
