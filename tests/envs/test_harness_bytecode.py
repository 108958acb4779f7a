"""A harness virtualenv without compiled bytecode is reported when the run starts: the sandbox shows it
read-only, so each episode's program would compile every module it imports again."""

from __future__ import annotations

import compileall
import logging
import sys
from pathlib import Path

from trialground.envs.config import EnvConfig
from trialground.envs.harness import bytecode_gap, harness_sandbox_config
from trialground.sandbox.base import SandboxConfig

VERSION = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _venv(root: Path, lib: str = VERSION, modules: int = 4) -> Path:
    (root / "bin").mkdir(parents=True)
    package = root / "lib" / lib / "site-packages" / "pkg"
    package.mkdir(parents=True)
    for i in range(modules):
        (package / f"m{i}.py").write_text(f"X = {i}\n")
    return root


def test_counts_modules_without_bytecode_of_their_own_python(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "v")
    assert bytecode_gap(str(venv)) == (4, 4)
    assert compileall.compile_dir(str(venv / "lib"), quiet=1)
    assert bytecode_gap(str(venv)) == (0, 4)
    assert bytecode_gap(str(venv), sample=2) == (0, 2)
    # bytecode of this Python does not count for a virtualenv of another version
    other = _venv(tmp_path / "w", lib="python3.99")
    assert compileall.compile_dir(str(other / "lib"), quiet=1)
    assert bytecode_gap(str(other)) == (4, 4)


def _config(venv: Path) -> EnvConfig:
    return EnvConfig(kind="harness", harness_command="python -m agent", harness_venv=str(venv))


def test_run_start_warns_about_an_uncompiled_virtualenv(tmp_path: Path, caplog) -> None:
    venv = _venv(tmp_path / "v")
    caplog.set_level(logging.WARNING, logger="trialground.envs.harness")
    harness_sandbox_config(SandboxConfig(backend="bwrap"), _config(venv), str(tmp_path))
    (record,) = caplog.records
    assert "4 of 4 modules" in record.getMessage() and "compileall" in record.getMessage()

    caplog.clear()
    assert compileall.compile_dir(str(venv / "lib"), quiet=1)
    harness_sandbox_config(SandboxConfig(backend="bwrap"), _config(venv), str(tmp_path))
    assert caplog.records == []
