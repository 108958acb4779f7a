"""Networked sandboxes (`network=True`): a network namespace of their own with outbound access only.

From a networked sandbox, under both launchers: the host's loopback listeners (at 127.0.0.1, at
slirp4netns's host alias 10.0.2.2, by name) and the host's abstract unix sockets are unreachable, while
outbound TCP to a non-loopback address works. This machine reaches only package registries, so the
"outside" is made here: a network namespace of its own (held by a process of the test), joined to the
host by a veth pair on a random /30 of the benchmark range 198.18.0.0/15, with a TCP server in it that the
sandbox must reach through its uplink.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from seckit import CONFIG

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import netns
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Sandbox
from trialground.sandbox.factory import open_sandbox

pytestmark = [
    pytest.mark.security,
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed"),
    pytest.mark.skipif(netns.helper() is None, reason="slirp4netns is not installed"),
]

NET = CONFIG.model_copy(update={"network": True, "prewarm": 0})
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="networked sandboxes need root (netns.require refuses them otherwise)"
)


def py(code: str) -> list[str]:
    return ["python3", "-I", "-S", "-c", code]


def connect_probe(host: str, port: int, family: str = "AF_INET") -> list[str]:
    return py(
        "import socket\n"
        f"s = socket.socket(socket.{family})\ns.settimeout(3)\n"
        f"try:\n    s.connect(({host!r}, {port}))\n    print('CONNECTED', s.recv(64).decode())\n"
        "except OSError as e:\n    print('refused', e)"
    )


@pytest.fixture(params=["forkserver", "bwrap"])
async def networked(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    sb = await open_sandbox(NET.model_copy(update={"launcher": request.param}))
    try:
        yield sb
    finally:
        await sb.close()


@pytest.fixture
def host_listener() -> Iterator[socket.socket]:
    """A TCP listener of the host on 127.0.0.1 (port 0), that greets whoever connects."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    try:
        yield listener
    finally:
        listener.close()


def _nobody_came(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


@ROOT_ONLY
async def test_host_loopback_is_unreachable(networked: Sandbox, host_listener: socket.socket) -> None:
    port = host_listener.getsockname()[1]
    for host in ("127.0.0.1", "127.0.0.2", "localhost", netns.GATEWAY):
        r = await networked.exec(connect_probe(host, port))
        assert r.ok and r.stdout.startswith("refused"), (host, r)
    r = await networked.exec(connect_probe("::1", port, "AF_INET6"))
    assert "CONNECTED" not in r.stdout, r
    assert _nobody_came(host_listener)


@ROOT_ONLY
async def test_host_abstract_unix_sockets_are_unreachable(networked: Sandbox) -> None:
    name = f"\0tg-abstract-{os.urandom(6).hex()}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(name)
    listener.listen()
    listener.setblocking(False)
    try:
        code = (
            "import socket\ns = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect({name!r})\n    print('CONNECTED')\n"
            "except OSError as e:\n    print('refused', e)"
        )
        r = await networked.exec(py(code))
        assert r.ok and r.stdout.startswith("refused"), r
        assert _nobody_came(listener)
    finally:
        listener.close()


@ROOT_ONLY
async def test_the_sandbox_has_its_own_namespace_with_an_uplink_only(networked: Sandbox) -> None:
    r = await networked.exec(
        "cat /etc/resolv.conf; awk 'NR>2 {print $1}' /proc/net/dev | sort; cat /proc/net/route"
    )
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert lines[0] == f"nameserver {netns.DNS}"
    assert lines[1:3] == ["lo:", "tap0:"]  # no host interface
    gateway = socket.inet_aton(netns.GATEWAY)[::-1].hex().upper()
    assert any(line.split()[:3] == ["tap0", "00000000", gateway] for line in lines[3:]), r.stdout
    own = Path("/proc/self/ns/net").stat().st_ino
    r = await networked.exec(["stat", "-L", "-c", "%i", "/proc/self/ns/net"])
    assert int(r.stdout) != own


@dataclass
class Outside:
    address: str
    port: int
    token: str


@pytest.fixture
def outside() -> Iterator[Outside]:
    """A TCP server at a non-loopback address in a network namespace of its own, routed from the host."""
    if os.geteuid() != 0 or not all(shutil.which(c) for c in ("ip", "unshare", "nsenter")):
        pytest.skip("making a network namespace needs root, iproute2 and util-linux")
    # The namespace is held by a process of this test (no `ip netns` name: /run/netns is shared with every
    # other process on the host, and concurrent runs must not meet there).
    tag = os.urandom(3).hex()
    host_if, ns_if = f"tgh{tag}", f"tgn{tag}"
    base = (198 << 24 | 18 << 16) + 4 * random.randrange(1 << 15)  # one of 32768 /30s: runs rarely meet
    host_ip, ns_ip = (socket.inet_ntoa((base + k).to_bytes(4, "big")) for k in (1, 2))

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    token = os.urandom(8).hex()
    holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "3600"])
    server: subprocess.Popen[str] | None = None
    inside = ["nsenter", "-t", str(holder.pid), "-n", "--"]
    try:
        for _ in range(100):  # unshare execs sleep once the namespace exists
            if os.readlink(f"/proc/{holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                break
            time.sleep(0.05)
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", str(holder.pid))
        ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        subprocess.run([*inside, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if], check=True, timeout=30)
        subprocess.run([*inside, "ip", "link", "set", ns_if, "up"], check=True, timeout=30)
        subprocess.run([*inside, "ip", "link", "set", "lo", "up"], check=True, timeout=30)
        code = (
            "import socket,sys\ns = socket.socket()\n"
            f"s.bind(({ns_ip!r}, 0))\ns.listen()\nprint(s.getsockname()[1], flush=True)\n"
            f"while True:\n    c, _ = s.accept()\n    c.sendall(b{token!r})\n    c.close()"
        )
        server = subprocess.Popen(
            [*inside, "python3", "-I", "-S", "-c", code], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield Outside(ns_ip, port, token)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        holder.kill()
        holder.wait()  # the namespace ends with its last process, and its end of the veth pair with it
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)


@ROOT_ONLY
async def test_outbound_tcp_to_a_non_loopback_address_works(networked: Sandbox, outside: Outside) -> None:
    r = await networked.exec(connect_probe(outside.address, outside.port))
    assert r.ok and r.stdout.strip() == f"CONNECTED {outside.token}", r


@ROOT_ONLY
async def test_a_forked_and_a_restarted_sandbox_keep_their_uplink(outside: Outside) -> None:
    """A fork is a new sandbox (a new uplink); a cold sandbox (warm=False) starts a PID 1 per command."""
    for launcher in ("forkserver", "bwrap"):
        async with await open_sandbox(NET.model_copy(update={"launcher": launcher})) as parent:
            child = await parent.fork()
            try:
                for sb in (parent, child):
                    r = await sb.exec(connect_probe(outside.address, outside.port))
                    assert r.stdout.strip() == f"CONNECTED {outside.token}", (launcher, r)
            finally:
                await child.close()
        cold = NET.model_copy(update={"launcher": launcher, "warm": False})
        async with await open_sandbox(cold) as sb:
            for _ in range(2):
                r = await sb.exec(connect_probe(outside.address, outside.port))
                assert r.stdout.strip() == f"CONNECTED {outside.token}", (launcher, r)


@ROOT_ONLY
async def test_the_uplink_ends_with_the_sandbox() -> None:
    for launcher in ("forkserver", "bwrap"):
        sb = await open_sandbox(NET.model_copy(update={"launcher": launcher}))
        assert (await sb.exec(["true"])).ok
        uplink = sb._uplink  # type: ignore[attr-defined]
        assert uplink is not None and uplink.proc.poll() is None
        await sb.close()
        deadline = time.monotonic() + 30
        while uplink.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert uplink.proc.poll() is not None, f"{launcher}: slirp4netns outlived its sandbox"


@ROOT_ONLY
async def test_a_networked_sandbox_leaves_every_other_workspace_mounted() -> None:
    """Starting an uplink must not unmount anything of the host's: slirp4netns detaches its old root in a
    mount namespace of its own, and a copy of the host's namespace that is not private would carry that
    back through the workspaces' shared mounts (every overlay of every sandbox on the host unmounted: the
    host then read each workspace as empty, and graded every file of it as deleted)."""
    files = {"lib/a.py": "a = 1\n", ".tg/site/m.py": "m = 2\n"}
    async with await open_sandbox(CONFIG.model_copy(update={"prewarm": 0}), files) as other:
        await other.snapshot()  # the workspace is now an overlay on a shared mount
        assert (await other.exec(["cat", "lib/a.py"])).stdout == "a = 1\n"
        for launcher in ("forkserver", "bwrap"):
            async with await open_sandbox(NET.model_copy(update={"launcher": launcher})) as sb:
                assert (await sb.exec(["true"])).ok
                assert sb._uplink is not None  # type: ignore[attr-defined]
            for path, text in files.items():
                assert (await other.read(path)).decode() == text, launcher
                assert (await other.exec(["cat", path])).stdout == text, launcher


FORKED_CHILD = """
import asyncio, gc, os, sys
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox
probe = sys.argv[1]

async def main():
    sb = await open_sandbox(SandboxConfig(network=True, prewarm=0, launcher=sys.argv[2]))
    print("before", (await sb.exec(["python3", "-I", "-S", "-c", probe])).stdout.strip(), flush=True)
    pid = os.fork()
    if pid == 0:  # the child's copy of the uplink is closed (as its garbage collection would), then exits
        sb._uplink.close()
        del sb
        gc.collect()
        os._exit(0)
    os.waitpid(pid, 0)
    print("after", (await sb.exec(["python3", "-I", "-S", "-c", probe])).stdout.strip(), flush=True)
    await sb.close()

asyncio.run(main())
"""


@ROOT_ONLY
@pytest.mark.parametrize("launcher", ["forkserver", "bwrap"])
def test_a_forked_child_leaves_the_parents_uplink_alone(outside: Outside, launcher: str) -> None:
    probe = connect_probe(outside.address, outside.port)[-1]
    out = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD, probe, launcher], capture_output=True, text=True, timeout=120
    )
    expected = f"CONNECTED {outside.token}"
    assert out.stdout.splitlines() == [f"before {expected}", f"after {expected}"], out.stderr[-2000:]


async def test_network_is_refused_without_the_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No slirp4netns on PATH: a networked sandbox is an error, never the host's namespace."""
    for tool in ("bwrap", "python3", "sh", "setpriv"):
        found = shutil.which(tool)
        if found:
            (tmp_path / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(tmp_path))
    netns.helper.cache_clear()
    try:
        assert netns.helper() is None
        with pytest.raises(SandboxError, match="slirp4netns"):
            await open_sandbox(NET)
        async with await open_sandbox(CONFIG) as plain:  # sandboxes without a network are unaffected
            assert (await plain.exec(["true"])).ok
    finally:
        monkeypatch.undo()
        netns.helper.cache_clear()


@ROOT_ONLY
@pytest.mark.network
async def test_dns_resolves_through_the_uplink(networked: Sandbox) -> None:
    r = await networked.exec(py("import socket\nprint(socket.getaddrinfo('pypi.org', 443)[0][4][0])"))
    assert r.ok and r.stdout.strip(), r


@pytest.mark.skipif(os.geteuid() == 0, reason="as root, networked sandboxes are supported")
async def test_an_unprivileged_host_refuses_networked_sandboxes() -> None:
    """Not root: a networked sandbox is refused with a reason, never given the host's network."""
    with pytest.raises(SandboxError, match="only when trialground runs as root"):
        await open_sandbox(NET)
    async with await open_sandbox(CONFIG) as plain:
        assert (await plain.exec(["true"])).ok
