"""Sweeping what killed owners leave behind: a workspace or cgroup is freed when its owner is gone, never
while it lives, wherever its pid is visible or not (`trialground/sandbox/owned.py`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trialground.sandbox import owned, workspace
from trialground.sandbox.backends.bwrap import cgroup, cgroup_v1, cgroup_v2

# Opens a snapshotted sandbox with one file, says where its workspace and cgroup are, then on each line of
# stdin reads the file on the host and in the sandbox and says what it read.
OWNER = r"""
import asyncio, json, os, sys
from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.backends.bwrap import cgroup

async def main():
    async with await open_sandbox(SandboxConfig(), {"f.txt": "kept"}) as sb:
        await sb.snapshot()
        groups = [str(p) for p in cgroup.own_groups()]
        print(json.dumps({"pid": os.getpid(), "root": str(sb.workspace.root), "groups": groups}), flush=True)
        for _ in sys.stdin:
            host = sb.workspace.read("f.txt").decode()
            inside = (await sb.exec(["cat", "f.txt"])).stdout
            print(json.dumps({"host": host, "inside": inside}), flush=True)

asyncio.run(main())
"""

# In a new pid namespace, the owner runs at a pid the host does not have (argv[1]: the host's pids).
IN_PID_NAMESPACE = r"""
import os, sys
avoid = {int(p) for p in sys.argv[1].split(",")}
while True:
    pid = os.fork()
    if pid == 0:
        if os.getpid() in avoid:
            os._exit(75)
        break
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 75:
        os._exit(0)
exec(sys.argv[2])
"""


def _sweep() -> None:
    """What the next process to start a sandbox does (the sweeps run once per process, so uncached)."""
    workspace.sweep_stale.__wrapped__()  # type: ignore[attr-defined]
    h = cgroup.hierarchy()
    if h.root is not None:
        sweep = cgroup_v1._sweep_stale if h.version == 1 else cgroup_v2._sweep_stale
        sweep.__wrapped__(h.root)  # type: ignore[attr-defined]


def _start(argv: list[str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        pytest.fail(f"the owner process ended before opening its sandbox (exit {proc.wait()})")
    return proc, json.loads(line)


def _wait_released(root: Path, within_s: float = 120.0) -> None:
    deadline = time.monotonic() + within_s
    while (fd := owned.abandoned(workspace.owner_lock(root))) is None:
        assert time.monotonic() < deadline, f"{root}'s owner still holds it {within_s:.0f} s after a SIGKILL"
        time.sleep(0.05)
    owned.release(fd)


def _host_pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()]


def test_a_killed_owners_workspace_and_cgroup_are_swept() -> None:
    proc, where = _start([sys.executable, "-c", OWNER])
    root = Path(str(where["root"]))
    groups = [Path(g) for g in where["groups"]]
    try:
        assert root.is_dir() and workspace.owner_lock(root).exists()
        _sweep()
        assert root.is_dir(), "a live owner's workspace was swept"
        assert all(g.is_dir() for g in groups), "a live owner's cgroup was swept"
    finally:
        proc.kill()
        proc.wait()
    _sweep()
    assert not root.exists() and not workspace.owner_lock(root).exists()
    assert not [g for g in groups if g.exists()]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a pid namespace needs root")
def test_an_owner_whose_pid_the_host_does_not_see_keeps_its_sandbox() -> None:
    """A process in another pid namespace (a container sharing /tmp and the cgroup hierarchy) owns a
    sandbox under a pid no process of ours has: sweeping leaves its workspace and cgroup in use."""
    unshare = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
    argv = [*unshare, sys.executable, "-c", IN_PID_NAMESPACE]
    proc, where = _start([*argv, ",".join(_host_pids()), OWNER])
    try:
        if str(where["pid"]) in _host_pids():  # a host process took that pid since: nothing to test
            pytest.skip(f"pid {where['pid']} is now also a pid of the host's")
        root = Path(str(where["root"]))
        assert root.name.startswith(f"ws.{where['pid']}.")
        _sweep()
        assert root.is_dir(), "a live owner's workspace was swept"
        assert all(Path(g).is_dir() for g in where["groups"]), "a live owner's cgroup was swept"
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("read\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, f"the owner failed after the sweep (exit {proc.poll()})"
        assert json.loads(line) == {"host": "kept", "inside": "kept"}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _wait_released(root)  # the namespace's processes die after `unshare` does
    _sweep()
    assert not root.exists(), "the owner is gone (its pid namespace ended with it), its workspace stayed"
