"""The fork-server launcher: the same sandbox as bubblewrap's, its template's life, its failures."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from proc_scan import processes_with

from trialground.errors import SandboxError
from trialground.sandbox import mounts
from trialground.sandbox.backends.bwrap import bwrap_cmd, forkserver
from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox, bwrap_available
from trialground.sandbox.base import ExecStatus, Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.workspace import BASE_DIR

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
SMALL = Limits(wall_s=10, cpu_s=10, memory_mb=128, pids=32, disk_mb=32, output_bytes=64 * 1024)

# What a program can observe of its sandbox, printed in a form both launchers must agree on.
SURVEY = """
id; hostname; pwd; echo "$PATH"; ls -A / /dev /workspace /tmp
grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status
for d in / /usr /etc /dev /proc/sys /tmp /dev/shm /workspace; do
  touch "$d/.probe" 2>/dev/null && echo "$d writable" || echo "$d read-only"
done
awk '$2 ~ "^/(usr|etc|tmp|workspace|dev/shm|proc)$" {print $2, $3}' /proc/mounts | sort
python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print("loopback up")'
python3 -c 'import os, sys; print(sys.prefix, os.getcwd())'
python3 -c 'import os; print(sum(n.isdigit() for n in os.listdir("/proc")))'
"""


async def test_both_launchers_build_the_same_sandbox() -> None:
    seen = {}
    for launcher in ("forkserver", "bwrap"):
        async with await open_sandbox(SandboxConfig(limits=SMALL, prewarm=0, launcher=launcher)) as sb:
            r = await sb.exec(SURVEY)
            assert r.ok, r
            seen[launcher] = r.stdout
    assert seen["forkserver"] == seen["bwrap"]
    assert "/workspace writable" in seen["bwrap"] and "/usr read-only" in seen["bwrap"]


async def test_a_dead_template_takes_its_sandboxes_along_and_is_replaced() -> None:
    config = SandboxConfig(limits=SMALL, prewarm=0)
    async with await open_sandbox(config) as sb:
        assert isinstance(sb, BwrapSandbox) and sb.forked()
        assert (await sb.exec(["echo", "one"])).stdout == "one\n"
        key = main_template_key()
        template = forkserver._templates[key]
        template.proc.kill()
        deadline = time.monotonic() + 5
        while sb.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not sb.alive()  # no sandbox outlives its template
        died = await sb.exec(["echo", "two"])
        assert died.status is ExecStatus.SANDBOX_ERROR and "sandbox died" in died.stderr, died
        # The next command starts the sandbox afresh, from a new template.
        assert (await sb.exec(["echo", "three"])).stdout == "three\n"
        assert forkserver._templates[key] is not template


@pytest.mark.parametrize("launcher", ["forkserver", "bwrap"])
def test_sandboxes_die_with_the_host_process(launcher: str) -> None:
    marker = f"{os.getpid() % 1000}.{len(launcher)}7319"
    script = textwrap.dedent(
        f"""
        import asyncio
        from trialground.sandbox.base import SandboxConfig
        from trialground.sandbox.factory import open_sandbox

        async def main():
            sb = await open_sandbox(SandboxConfig(prewarm=0, launcher={launcher!r}))
            print("ready", flush=True)
            await sb.exec("sleep {marker}")

        asyncio.run(main())
        """
    )
    host = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None and host.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while not processes_with(f"sleep\x00{marker}") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_with(f"sleep\x00{marker}"), "the command never started"
    finally:
        host.kill()
        host.wait()
    deadline = time.monotonic() + 5
    while processes_with(f"sleep\x00{marker}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with(f"sleep\x00{marker}") == []


def main_template_key() -> tuple[int, str, int | None]:
    """The key of this process's template for the default runtime (tests may start others)."""
    return (os.getpid(), sys.base_prefix, 65534 if os.geteuid() == 0 else None)


async def test_a_sandbox_that_cannot_be_built_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_views(config: SandboxConfig) -> list[tuple[str, str]]:
        return [("/nonexistent-trialground-view", "/etc")]

    monkeypatch.setattr("trialground.sandbox.backends.bwrap.bwrap_cmd.sandbox_views", broken_views)
    sb = await open_sandbox(SandboxConfig(limits=SMALL, prewarm=0))
    try:
        with pytest.raises(
            SandboxError, match=r"fork server.*open_tree /nonexistent-trialground-view: No such file"
        ):
            await sb.exec(["true"])
    finally:
        await sb.close()
    monkeypatch.undo()
    async with await open_sandbox(SandboxConfig(limits=SMALL, prewarm=0)) as fine:  # the template is fine
        assert (await fine.exec(["echo", "ok"])).stdout == "ok\n"


@pytest.mark.parametrize("launcher", ["forkserver", "bwrap"])
async def test_read_only_views_stay_read_only_below_their_own_mounts(
    monkeypatch: pytest.MonkeyPatch, launcher: str
) -> None:
    """A view whose source has a writable file system mounted inside it is read-only all the way down."""
    if not mounts.CAN_MOUNT:
        pytest.skip("needs root to mount")
    source = Path(tempfile.mkdtemp(prefix="view-test-", dir=BASE_DIR))  # where the sandbox uid may look
    os.chmod(source, 0o755)
    (source / "inner").mkdir()
    assert mounts.mount_tmpfs(source / "inner", 1)
    try:
        os.chmod(source / "inner", 0o777)
        (source / "inner" / "seen.txt").write_text("inner\n")
        original = bwrap_cmd.sandbox_views

        def with_view(config: SandboxConfig) -> list[tuple[str, str]]:
            return [*original(config), (str(source), "/opt/view")]

        monkeypatch.setattr(bwrap_cmd, "sandbox_views", with_view)
        async with await open_sandbox(SandboxConfig(limits=SMALL, prewarm=0, launcher=launcher)) as sb:
            r = await sb.exec("cat /opt/view/inner/seen.txt; touch /opt/view/inner/x /opt/view/x 2>&1")
            assert r.stdout.startswith("inner\n") and r.stdout.count("Read-only file system") == 2, r
        assert not (source / "inner" / "x").exists()
    finally:
        mounts.umount(source / "inner")
        shutil.rmtree(source)


@pytest.mark.skipif(
    not os.path.exists("/usr/bin/python3") or os.path.realpath(sys.base_prefix) == "/usr",
    reason="needs a second Python runtime at /usr",
)
async def test_another_runtime_gets_its_own_template() -> None:
    """A sandbox on another Python (the system's) runs its supervisor, and its Python commands, on that
    Python: the template is started from it and compiles the supervisor itself."""
    seen = []
    for fast in (True, False):  # the pre-started interpreter, and a real start
        config = SandboxConfig(limits=SMALL, prewarm=0, python_prefix="/usr", python_fast=fast)
        async with await open_sandbox(config) as sb:
            r = await sb.exec(["python3", "-c", "import sys; print(sys.prefix, sys.version)"])
            assert r.ok and r.stdout.startswith("/usr "), r
            seen.append(r.stdout)
    assert seen[0] == seen[1]
    ours = [key for key in forkserver._templates if key[0] == os.getpid()]
    assert {key[1] for key in ours} >= {"/usr"}


def test_a_forked_host_starts_its_own_template() -> None:
    async def echo(word: str) -> str:
        async with await open_sandbox(SandboxConfig(limits=SMALL, prewarm=0)) as sb:
            return (await sb.exec(["echo", word])).stdout

    assert asyncio.run(echo("parent")) == "parent\n"
    parent = forkserver._templates[main_template_key()]
    pid = os.fork()
    if pid == 0:  # the child: its own template, none of the parent's sockets
        ok = asyncio.run(echo("child")) == "child\n"
        ok = ok and all(key[0] == os.getpid() for key in forkserver._templates)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(echo("again")) == "again\n"
    assert forkserver._templates[main_template_key()] is parent and parent.proc.poll() is None
