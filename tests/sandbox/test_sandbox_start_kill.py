"""A bubblewrap sandbox closed the moment it was started leaves no process behind, on a host where no
cgroup is there to kill what is left (a non-root host on cgroup v1).

bubblewrap's child waits on an eventfd for the outer process until it has asked to die with its parent;
SIGKILL to the outer process alone in that window left the child blocked for ever (a few in every hundred
such closes here). `spawn.kill_group` kills the launcher's whole process group."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from proc_scan import processes_with

from trialground.sandbox.backends.bwrap import cgroup
from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox, bwrap_available
from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.factory import open_sandbox

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


async def test_sandboxes_closed_as_they_start_leave_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "create", lambda name: None)  # nothing but the launcher's own kill
    workspaces: list[str] = []
    for i in range(120):
        sb = await open_sandbox(SandboxConfig(prewarm=0, launcher="bwrap"))
        assert isinstance(sb, BwrapSandbox) and sb.cgroup is None
        workspaces.append(str(sb.workspace.ws))
        time.sleep((i % 20) * 0.00025)  # 0-5 ms into bubblewrap's start, the event loop held
        await sb.close()
    left = processes_with(*workspaces)
    for _ in range(200):  # the group's SIGKILL is asynchronous: give the processes time to go
        if not left:
            break
        await asyncio.sleep(0.05)
        left = processes_with(*workspaces)
    seen = {}
    for pid in left:  # never leave them to the rest of the suite
        try:
            seen[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()[:120]
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    assert left == [], seen
