"""Host-side state that all sandboxes share: the /etc view, the runtime view, the cgroup mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trialground.sandbox import mounts
from trialground.sandbox.backends.bwrap import cgroup, cgroup_v1, views
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts)")
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def test_etc_view_copies_what_others_may_read_and_follows_changes(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "ssl" / "certs").mkdir(parents=True)
    (etc / "ssl" / "private").mkdir(mode=0o700)
    (etc / "ssl" / "private" / "key.pem").write_text("SECRET")
    (etc / "ssl" / "certs" / "ca.pem").write_text("CA")
    (etc / "ssl" / "certs" / "link.pem").symlink_to("ca.pem")
    (etc / "app.conf").write_text("one")
    (etc / "shadowish").write_text("SECRET")
    (etc / "shadowish").chmod(0o600)
    (tmp_path / "zone").write_text("UTC")
    (etc / "localtime").symlink_to(tmp_path / "zone")
    names = ("app.conf", "ssl", "localtime", "shadowish", "missing")
    build = views.etc_view.__wrapped__  # no per-process cache: each call looks at the source again
    first = build(names, etc)
    made = [first]
    try:
        assert sorted(os.listdir(first)) == ["app.conf", "group", "localtime", "passwd", "ssl"]
        assert (first / "app.conf").read_text() == "one"
        assert "sandbox:x:1000" in (first / "passwd").read_text()
        assert (first / "localtime").read_text() == "UTC" and not (first / "localtime").is_symlink()
        assert os.readlink(first / "ssl" / "certs" / "link.pem") == "ca.pem"
        assert not (first / "ssl" / "private").exists()  # others may not list it, so no copy either
        assert build(names, etc) == first  # nothing changed: the same view
        (etc / "app.conf").write_text("two!")
        made.append(second := build(names, etc))
        assert second != first and (second / "app.conf").read_text() == "two!"
        assert (first / "app.conf").read_text() == "one"  # a view in use is never changed
    finally:
        for view in made:
            shutil.rmtree(view)


@needs_bwrap
async def test_sandbox_etc_is_the_read_only_view(sandbox: Sandbox) -> None:
    r = await sandbox.exec("ls -A /etc; touch /etc/x 2>/dev/null && echo WROTE; cat /etc/passwd")
    listed = set(r.stdout.split("root:x:0:0")[0].split())
    assert listed == {n for n in views.ETC_FILES if os.path.exists(f"/etc/{n}")} | {"passwd", "group"}
    assert "WROTE" not in r.stdout and "sandbox:x:1000:1000" in r.stdout


@needs_bwrap
@root_only
async def test_shared_mounts_are_made_once_across_processes() -> None:
    """Several processes opening their first sandboxes at once leave one runtime view and one cgroup
    mount, and a runtime view stacked by an older version is brought back to one."""
    async with await open_sandbox(SandboxConfig(prewarm=0)) as sb:  # makes the shared state in this process
        assert (await sb.exec(["true"])).ok
    runtime = Path(views.runtime_source(sys.base_prefix))
    mounts.bind(Path(sys.base_prefix), runtime)  # what the old race left: a second bind on top
    assert mounts.mount_count(runtime) == 2
    cli = [sys.executable, "-m", "trialground", "sandbox", "run", "--", "true"]
    procs = [subprocess.Popen(cli) for _ in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 4
    assert mounts.mount_count(runtime) == 1
    if cgroup.hierarchy().version == 1 and cgroup_v1.favor_dynamic_moves():
        assert mounts.mount_count(cgroup_v1.DYNMODS_MOUNT) == 1


@needs_bwrap
@root_only
@pytest.mark.skipif(cgroup.hierarchy().version != 1, reason="sandboxes use no cgroup v1 here")
async def test_cgroup_moves_use_a_favordynmods_hierarchy_the_sandbox_cannot_see(sandbox: Sandbox) -> None:
    if not cgroup_v1.favor_dynamic_moves():
        pytest.skip("this kernel has no favordynmods (before 6.0)")
    # Only the mount at our path: other processes (other sandbox directories) may have their own.
    ours = f" {cgroup_v1.DYNMODS_MOUNT} cgroup "
    host = [line for line in Path("/proc/self/mounts").read_text().splitlines() if ours in line]
    assert len(host) == 1 and "favordynmods" in host[0]
    inside = await sandbox.exec(["cat", "/proc/self/mountinfo"])
    assert inside.ok and "favordynmods" not in inside.stdout and "cgroup" not in inside.stdout


@root_only
def test_a_kept_view_follows_its_directory_when_it_is_made_again(tmp_path: Path) -> None:
    """A virtualenv rebuilt at the same path (a fresh checkout where an older one was): the kept read-only
    view must show the new directory, not the removed one (whose bind makes every later sandbox fail)."""
    if not mounts.CAN_MOUNT:
        pytest.skip("no mounts here")
    source = tmp_path / "venv"
    source.mkdir()
    (source / "marker").write_text("old")
    view = Path(views.runtime_source(str(source)))
    try:
        assert (view / "marker").read_text() == "old"
        shutil.rmtree(source)
        source.mkdir()
        (source / "marker").write_text("new")
        assert not mounts.shows(view, source)  # the kept bind still shows the removed directory
        assert Path(views.runtime_source(str(source))) == view
        assert (view / "marker").read_text() == "new" and mounts.mount_count(view) == 1
        views._checked.discard(str(source))  # a new process: its first call goes through the mount table
        shutil.rmtree(source)
        source.mkdir()
        assert views.runtime_source(str(source)) == str(view) and not (view / "marker").exists()
        shutil.rmtree(source)  # gone for good: the sweep of a process's first call detaches its view
        assert mounts.mount_count(view) == 1
        assert mounts.detach_deleted(view.parent) >= 1 and mounts.mount_count(view) == 0
    finally:
        if mounts.is_mount_point(view):
            mounts.umount(view)
