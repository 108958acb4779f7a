"""Hostile programs in real sandboxes, from both launchers (the fork server and bubblewrap). Every attack
ends by proving a fresh sandbox still works."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from seckit import CONFIG

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Sandbox
from trialground.sandbox.factory import open_sandbox

pytestmark = pytest.mark.security


@pytest.fixture(params=["forkserver", "bwrap"])
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    """A sandbox from each launcher: every attack runs against both."""
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    config = CONFIG.model_copy(update={"launcher": request.param})
    sb = await open_sandbox(config)
    try:
        yield sb
    finally:
        await sb.close()
    # The machine is still fine: a brand-new sandbox works.
    async with await open_sandbox(config) as fresh:
        result = await fresh.exec(["echo", "alive"])
        assert result.ok and result.stdout == "alive\n", result


@pytest.fixture
def host_secret(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Secrets planted on the host: under /root (or $HOME) and under /tmp."""
    token = os.urandom(8).hex()
    home = Path("/root") if os.geteuid() == 0 else Path.home()
    paths = {"home": home / f".tg-secret-{token}", "tmp": Path("/tmp") / f"tg-secret-{token}"}
    for p in paths.values():
        p.write_text(f"SECRET-{token}")
    try:
        yield paths
    finally:
        for p in paths.values():
            p.unlink(missing_ok=True)
