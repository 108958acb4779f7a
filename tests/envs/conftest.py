from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from trialground.sandbox.base import SandboxConfig
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader


@pytest.fixture
def sandbox_config() -> SandboxConfig:
    return SandboxConfig()


@pytest.fixture
async def grader(sandbox_config: SandboxConfig) -> AsyncIterator[Grader]:
    g = make_grader(sandbox_config, RewardConfig())
    yield g
    await g.close()
