"""`trialground policy serve` refuses bad options and missing models with exit status 2, naming them."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from trialground.cli import app


def _serve(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(app, ["policy", "serve", *args], terminal_width=200)
    return out.exit_code, out.output


def test_bad_options_and_missing_models_are_usage_errors(tmp_path: Path) -> None:
    code, text = _serve("--port", "70000")
    assert code == 2 and "--port: 70000 is not a TCP port" in text
    code, text = _serve("--dtype", "float8", "--port", "0")
    assert code == 2 and "--dtype" in text
    code, text = _serve("--model", str(tmp_path / "absent"), "--port", "0")
    assert code == 2 and "config.json missing" in text
