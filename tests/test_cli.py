"""The command line: help everywhere, clear errors with exit status 2, `config show`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trialground.cli import app

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def tg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialground", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


COMMANDS = [
    [],
    ["train"],
    ["eval"],
    ["config"],
    ["config", "show"],
    ["tasks"],
    ["tasks", "list"],
    ["tasks", "show"],
    ["tasks", "export"],
    ["tasks", "validate"],
    ["sandbox"],
    ["sandbox", "run"],
    ["sandbox", "serve"],
    ["env"],
    ["env", "serve"],
    ["policy"],
    ["policy", "serve"],
    ["verify"],
    ["report"],
    ["dashboard"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "trialground")
def test_every_command_has_help(command: list[str]) -> None:
    out = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "Usage:" in out.stdout
    # every option of the command is described, not just listed
    for line in out.stdout.splitlines():
        stripped = line.strip("│ ").strip()
        if stripped.startswith("--") and stripped != "--help":
            assert len(stripped.split()) >= 2, f"option without description: {line!r}"


def test_config_show_prints_resolved_config() -> None:
    out = tg("config", "show", str(QUICKSTART), "--set", "trainer.lr=0.5")
    assert out.returncode == 0, out.stderr
    assert "lr: 0.5" in out.stdout
    assert "name: quickstart" in out.stdout


def test_malformed_config_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop:\n  steps: -3\ntrainer:\n  bogus: 1\n")
    for command in (["config", "show", str(bad)], ["train", str(bad)], ["eval", str(bad)]):
        out = tg(*command)
        assert out.returncode == 2, (command, out.stderr)
        assert str(bad) in out.stderr
        assert "loop.steps" in out.stderr and "trainer.bogus" in out.stderr
        assert "Traceback" not in out.stderr


def test_missing_config_file_is_a_usage_error(tmp_path: Path) -> None:
    out = tg("train", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2
    assert "no such config file" in out.stderr


def test_a_missing_extra_is_a_clear_error_before_the_run_starts(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: nothing is missing")
    res = tg(
        "train", "examples/quickstart.yaml", "--set", "policy.backend=vllm", "--set", f"output_dir={tmp_path}"
    )
    assert res.returncode == 2
    assert "pip install 'trialground[vllm]'" in res.stderr and "Traceback" not in res.stderr
    assert not any(tmp_path.iterdir())  # nothing was started
