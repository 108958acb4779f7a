"""sandbox.preload: modules the supervisor imports before any command; commands that ask for them fork
from an interpreter holding them, no command's state reaches the next, and a late preload is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox
from trialground.sandbox.base import SandboxConfig, View
from trialground.sandbox.results import Collected

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")

MODULE = "import os\nPID = os.getpid()\nSTATE = []\n"
PROBE = (
    "import sys; m = sys.modules.get('tg_preloaded_probe'); "
    "print(m.PID if m else None, m.STATE if m else None); m and m.STATE.append('dirty')"
)
KEEP = {"TRIALGROUND_PRELOADED": "keep"}


@pytest.fixture
def package(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "tg_preloaded_probe.py").write_text(MODULE)
    for p in (tmp_path, pkg, pkg / "tg_preloaded_probe.py"):
        p.chmod(0o755)
    return pkg


def _config(pkg: Path, modules: tuple[str, ...]) -> SandboxConfig:
    return SandboxConfig(
        views=(View(source=str(pkg), target="/opt/tg-preload"),),
        preload=modules,
        preload_path=("/opt/tg-preload",),
    )


async def test_preloaded_modules_reach_commands_that_ask_and_no_state_carries(package: Path) -> None:
    sandbox = await BwrapSandbox.create(_config(package, ("tg_preloaded_probe", "no_such_module_here")))
    try:
        seen = [(await sandbox.exec(["python3", "-c", PROBE], env=KEEP)).stdout for _ in range(3)]
        # imported by PID 1 (the supervisor), before any command; each command starts from it afresh
        assert seen == ["1 []\n"] * 3
        assert (await sandbox.exec(["python3", "-c", PROBE])).stdout == "None None\n"  # not asked: dropped
        report = sandbox.preload_report
        assert report["loaded"] == ["tg_preloaded_probe"] and report["modules"] >= 1
        assert report["errors"] and "no_such_module_here" in report["errors"][0]  # reported, not fatal
        await sandbox.restore(await sandbox.snapshot())
        assert (await sandbox.exec(["python3", "-c", PROBE], env=KEEP)).stdout == "1 []\n"
    finally:
        await sandbox.close()


async def test_a_preload_after_a_command_is_refused(package: Path) -> None:
    sandbox = await BwrapSandbox.create(SandboxConfig())
    try:
        assert (await sandbox.exec(["true"])).exit_code == 0
        late = {"preload": {"modules": ["tg_preloaded_probe"], "path": ["/nonexistent"]}}
        async with sandbox._lock:
            answer = await sandbox._exchange(late, b"", Collected(cap=0), timeout=30)
        assert answer["loaded"] == [] and "refused" in answer["errors"][0]
    finally:
        await sandbox.close()


@pytest.mark.parametrize("path", ["/workspace/lib", "/tmp/x", "relative", "/dev/shm"])
def test_a_preload_path_sandboxed_code_can_write_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="preload_path"):
        SandboxConfig(preload=("json",), preload_path=(path,))
