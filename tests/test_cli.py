"""The command line: help everywhere, clear errors with exit status 2, `config show`."""

from __future__ import annotations

import os
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


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialground", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
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


def test_step_line_reads_like_a_training_tool() -> None:
    from trialground.cli.run_cmd import StepLine, format_loss

    assert format_loss(2.28e-08) == "+2.28e-08"  # not +0.0000
    assert format_loss(-0.5) == "-0.5000" and format_loss(0.0) == "+0.0000"
    line = StepLine()
    assert line(0, {"eval/pass@1": 0.367, "probe/pass@1": 0.3}) == "eval 36.7% @ step 0"
    step1 = line(1, {"reward/mean": 0.25, "train/loss": 1e-6})
    assert step1 == "reward 0.250  loss +1.00e-06  eval 36.7% @ step 0"
    step10 = line(10, {"reward/mean": 0.5, "train/loss": 0.01, "probe/pass@1": 0.5})
    assert step10.endswith("probe 50.0% @ step 10")


@pytest.mark.slow
def test_train_and_eval_show_progress_without_third_party_bars(tmp_path: Path) -> None:
    small = [
        "loop.steps=2", "loop.batch_tasks=2", "loop.samples_per_task=2", "tasks.num_train=20",
        "tasks.num_eval=3", "loop.probe_interval=0", f"output_dir={tmp_path}", "name=progress",
    ]  # fmt: skip
    sets = [arg for kv in small for arg in ("--set", kv)]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    train = _cli(["train", str(QUICKSTART), *sets], env=env)
    assert train.returncode == 0, train.stderr
    assert "Loading weights" not in train.stderr and "Writing model shards" not in train.stderr
    assert "eta" in train.stderr and "2/2" in train.stderr and "eval " in train.stderr
    ev = _cli(["eval", str(QUICKSTART), *sets[:-2]], env=env)
    assert ev.returncode == 0, ev.stderr
    assert "Loading weights" not in ev.stderr and "Traceback" not in ev.stderr
