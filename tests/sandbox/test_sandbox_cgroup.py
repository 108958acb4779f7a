"""Which cgroup hierarchy sandboxes use, the cgroup v2 groups on a real cgroup2 hierarchy, and the loud
fallback where a limit cannot be enforced.

Where the v2 hierarchy has no memory/pids/cpu controllers (they are bound to v1 hierarchies on a hybrid
host), the tests that need them skip saying so; group life, membership, kill-all, counters without
controllers, detection and the warnings run on every host with a cgroup2 mount."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from trialground.sandbox.backends.bwrap import cgroup, cgroup_v2
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a cgroup2 hierarchy needs root")
LIBC = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def v2_base(tmp_path: Path) -> Iterator[Path]:
    """Our own mount of the cgroup2 hierarchy and an empty base directory in it (removed afterwards)."""
    point = tmp_path / "cgroup2"
    point.mkdir()
    if LIBC.mount(b"none", str(point).encode(), b"cgroup2", 0, None) != 0:
        pytest.skip(f"cannot mount cgroup2 here: {os.strerror(ctypes.get_errno())}")
    base = point / f"trialground-test-{os.getpid()}"
    try:
        base.mkdir()
        cgroup_v2.enable(point)
        cgroup_v2.enable(base)
        yield base
    finally:
        for group in sorted(base.glob("*"), reverse=True):
            if group.is_dir():
                group.rmdir()
        base.rmdir()
        LIBC.umount2(str(point).encode(), 2)


def test_detection_reads_the_real_mounts() -> None:
    """The mount table and /proc/self/cgroup as the kernel shows them: a cgroup2 mount found is a
    directory of the hierarchy, and our own cgroup there lists this very process."""
    found = cgroup._mountinfo()
    assert any(t in ("cgroup", "cgroup2", "tmpfs") for _, _, t in found)
    own = cgroup._own_v2_cgroup()
    if own is None:
        assert not any(t == "cgroup2" for _, _, t in found)
        return
    assert str(os.getpid()) in (own / "cgroup.procs").read_text().split()
    h = cgroup.hierarchy()
    assert h.version in (0, 1, 2)
    if h.version == 0:
        assert h.reason  # never silently without


@root_only
def test_a_v2_group_holds_and_kills_every_member(v2_base: Path) -> None:
    group = cgroup_v2.CgroupV2.make(v2_base, "kill")
    assert group is not None and group.dir.is_dir()
    available = cgroup_v2.controllers(group.dir)
    assert group.enforced() == frozenset({c for c in ("memory", "pids", "cpu") if c in available} | {"kill"})
    group.set_limits(64 << 20, 16, 0.5)  # controllers that are not there are left alone, without error
    # A process that keeps forking children that fork again: every one is born in the group.
    spawner = textwrap.dedent("""
        import os, time
        for _ in range(20):
            if os.fork() == 0:
                if os.fork() == 0:
                    time.sleep(600)
                os._exit(0)
        time.sleep(600)
    """)
    shell = subprocess.Popen(
        ["/bin/sh", "-c", 'echo $$ > "$1" && exec "$2" -c "$3"', "sh", group.procs_files()[0], sys.executable,
         spawner],
    )  # fmt: skip
    try:
        for _ in range(500):
            if len(group.pids()) >= 21:
                break
            subprocess.run(["sleep", "0.01"])
        members = group.pids()
        assert shell.pid in members and len(members) >= 21, members
        assert group.counters() == (0, 0) or "memory" in available or "pids" in available
        group.kill_all()
        assert shell.wait(timeout=10) == -9
        for _ in range(500):
            if not group.pids():
                break
            subprocess.run(["sleep", "0.01"])
        assert group.pids() == []
        assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in members)
    finally:
        if shell.poll() is None:
            shell.kill()
        group.kill_all()
        group.remove()
    assert not group.dir.exists()
    assert cgroup_v2.CgroupV2.own(v2_base) == []


@root_only
def test_a_v2_memory_limit_kills_and_is_counted(v2_base: Path) -> None:
    if "memory" not in cgroup_v2.controllers(v2_base):
        pytest.skip("the memory controller is bound to a cgroup v1 hierarchy here, not available in v2")
    group = cgroup_v2.CgroupV2.make(v2_base, "oom")
    assert group is not None
    try:
        group.set_limits(32 << 20, 64)
        group.start_peak()
        hog = "b = []\nwhile True: b.append(bytearray(4 << 20))"
        proc = subprocess.run(
            ["/bin/sh", "-c", 'echo $$ > "$1" && exec "$2" -c "$3"', "sh", group.procs_files()[0],
             sys.executable, hog], timeout=60,
        )  # fmt: skip
        assert proc.returncode == -9
        assert group.counters()[0] >= 1
        assert group.peak_bytes() == 0 or group.peak_bytes() >= 16 << 20
    finally:
        group.kill_all()
        group.remove()


SANDBOX_SCRIPT = textwrap.dedent("""
    import asyncio, json, logging, os, sys
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from trialground.sandbox.backends.bwrap import cgroup
    from trialground.sandbox.base import Limits, SandboxConfig
    from trialground.sandbox.factory import open_sandbox

    async def main():
        out = {"hierarchy": [cgroup.hierarchy().version, str(cgroup.hierarchy().root)]}
        limits = Limits(memory_mb=64, pids=16, wall_s=10)
        async with await open_sandbox(SandboxConfig(limits=limits, prewarm=0)) as sb:
            r = await sb.exec(["echo", "ok"])
            out["ok"] = [r.stdout, list(r.limit_warnings)]
            out["groups"] = [str(p) for p in cgroup.own_groups()]
            if sb.cgroup is not None:
                pid1 = sb._proc.pid
                out["pid1_in_group"] = str(pid1) in " ".join(
                    open(f, encoding="ascii").read() for f in sb.cgroup.procs_files())
            bomb = (
                "import os, time\\nn = 0\\ntry:\\n    for _ in range(200):\\n"
                "        if os.fork() == 0:\\n            time.sleep(30)\\n            os._exit(0)\\n"
                "        n += 1\\nexcept OSError as e:\\n    print('refused after', n, e.errno)\\n"
            )
            r = await sb.exec(["python3", "-c", bomb])
            out["bomb"] = [r.status, r.stdout]
            r = await sb.exec(["python3", "-c", "b = bytearray(200 << 20); print('allocated')"])
            out["memory"] = [r.status, r.stdout, r.stderr[-200:]]
            r = await sb.exec(["echo", "after"])
            out["after"] = r.stdout
        from trialground.sandbox.backends.bwrap import teardown
        await teardown.drain()
        out["groups_after"] = [str(p) for p in cgroup.own_groups()]
        print(json.dumps(out))

    asyncio.run(main())
""")


def _run_sandbox(env: dict[str, str]) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", SANDBOX_SCRIPT], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


@pytest.mark.skipif(not bwrap_available(), reason="needs bubblewrap")
def test_without_cgroups_limits_fall_back_loudly() -> None:
    """No cgroup at all (TRIALGROUND_CGROUP=off, as for a non-root user on cgroup v1): memory and pids
    are still bounded (RLIMIT_AS, RLIMIT_NPROC), and every result says they are not cgroup limits; the
    warning is logged once."""
    out, log = _run_sandbox({"TRIALGROUND_CGROUP": "off"})
    assert out["hierarchy"][0] == 0 and out["groups"] == []
    stdout, warnings = out["ok"]
    assert stdout == "ok\n"
    disk = [] if os.geteuid() == 0 else ["disk"]  # no size-limited tmpfs workspace without root
    assert [w.split(":")[0] for w in warnings] == ["memory", "pids", *disk], warnings
    assert "RLIMIT_AS" in warnings[0] and "RLIMIT_NPROC" in warnings[1]
    assert log.count("sandbox limit memory:") == 1 and log.count("sandbox limit pids:") == 1, log
    _status, said = out["bomb"]
    assert said.startswith("refused after") and int(said.split()[2]) < 16, out  # EAGAIN, under pids=16
    assert out["memory"][1] == "" and "MemoryError" in out["memory"][2], out  # 200 MiB > 64 MiB of space
    assert out["after"] == "after\n"


@root_only
@pytest.mark.skipif(not bwrap_available(), reason="needs bubblewrap")
def test_sandboxes_in_a_configured_v2_hierarchy(v2_base: Path) -> None:
    """TRIALGROUND_CGROUP=v2 with the root pointed at our own cgroup2 mount: every sandbox gets a group
    there holding its PID 1, removed on close; whatever the v2 hierarchy lacks is reported."""
    out, _log = _run_sandbox({"TRIALGROUND_CGROUP": "v2", "TRIALGROUND_CGROUP_ROOT": str(v2_base)})
    assert out["hierarchy"] == [2, str(v2_base)]
    assert len(out["groups"]) == 1 and out["groups"][0].startswith(f"{v2_base}/")
    assert out["pid1_in_group"] is True
    stdout, warnings = out["ok"]
    assert stdout == "ok\n"
    available = cgroup_v2.controllers(v2_base)
    expected = [c for c in ("memory", "pids") if c not in available]
    assert [w.split(":")[0] for w in warnings] == expected, warnings  # (root only: the disk quota is there)
    if "memory" in available:
        assert out["memory"][0] == "memory_limit", out
    else:
        assert "MemoryError" in out["memory"][2], out
    status, said = out["bomb"]
    assert said.startswith("refused after") and int(said.split()[2]) < 16, out
    if "pids" in available:
        assert status == "pids_limit", out
    assert out["after"] == "after\n"
    assert out["groups_after"] == []


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@root_only
@pytest.mark.skipif(not bwrap_available(), reason="needs bubblewrap")
def test_a_delegated_parent_is_found_and_used(v2_base: Path) -> None:
    """A process in a leaf cgroup whose parent it may write (systemd's Delegate=yes) makes its sandboxes'
    groups in a `trialground` directory of that parent, found from /proc/self/cgroup and the mount table
    (no configured root)."""
    leaf = v2_base / "leaf"
    leaf.mkdir()
    try:
        proc = subprocess.run(
            ["/bin/sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$2" -c "$3"', "sh", str(leaf),
             sys.executable, SANDBOX_SCRIPT],
            env={**os.environ, "TRIALGROUND_CGROUP": "v2"}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.splitlines()[-1])
        version, base = out["hierarchy"]
        assert version == 2 and Path(base).name == "trialground" and Path(base).parent.name == v2_base.name
        assert len(out["groups"]) == 1 and out["groups"][0].startswith(base + "/")
        assert out["pid1_in_group"] is True and out["ok"][0] == "ok\n" and out["groups_after"] == []
    finally:
        delegated = v2_base / "trialground"
        if delegated.exists():
            delegated.rmdir()
        leaf.rmdir()
