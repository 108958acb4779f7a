"""Real bubblewrap sandboxes with small limits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.bwrap import bwrap_available
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
