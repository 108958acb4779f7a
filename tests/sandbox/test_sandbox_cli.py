"""`trialground sandbox run|serve`: results, exit statuses, clear messages on bad input."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from trialground.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["sandbox", "run", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_result_and_exit_zero_whatever_the_program_did(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("data")
    code, out, _ = run("--workspace", str(tmp_path), "--json", "--", "bash", "-c", "cat in.txt; exit 7")
    body = json.loads(out)
    assert code == 0 and body["status"] == "nonzero_exit"
    assert body["exit_code"] == 7 and body["stdout"] == "data"
    code, out, _ = run("--json", "--timeout", "0.3", "--", "sleep", "5")
    assert code == 0 and json.loads(out)["status"] == "timeout"
    code, out, _ = run("--json", "--output-bytes", "2000", "--", "yes")
    assert code == 0 and json.loads(out)["stdout_truncated"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "-1", "--", "true"], "--timeout"),
        (["--memory", "-5", "--", "true"], "--memory"),
        (["--pids", "0", "--", "true"], "--pids"),
        (["--workspace", "/no/such/dir", "--", "true"], "does not exist"),
        (["--backend", "docker", "--", "true"], "--backend"),
    ],
)
def test_bad_input_is_a_clear_usage_error(args: list[str], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2 and message in err and "Traceback" not in out + err


def test_unknown_program_is_a_usage_error() -> None:
    code, out, err = run("--json", "--", "no-such-program-xyz")
    assert code == 2 and "unknown command" in err and json.loads(out)["exit_code"] == 127
    code, _, _ = run("--", "bash", "-c", "exit 127")  # a program that exits 127 is just a result
    assert code == 0


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = runner.invoke(app, ["sandbox", "frobnicate"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_missing_bwrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trialground.sandbox.backends.bwrap.bwrap_cmd.BWRAP", "/nonexistent/bwrap")
    code, _, err = run("--", "true")
    assert code == 3 and "apt-get install bubblewrap" in " ".join(err.split())


def test_serve_rejects_bad_token_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sandbox", "serve", "--token-file", str(tmp_path / "none")])
    assert result.exit_code == 2 and "token" in result.stderr


@pytest.mark.parametrize("option", ["--max-body-mb", "--header-timeout-s", "--body-timeout-s"])
def test_serve_rejects_non_positive_limits(tmp_path: Path, option: str) -> None:
    (tmp_path / "token").write_text("serve-test-token-0123456789")
    result = runner.invoke(app, ["sandbox", "serve", "--token-file", str(tmp_path / "token"), option, "0"])
    assert result.exit_code == 2 and option in result.stderr


@pytest.mark.slow
def test_serve_command_over_http(tmp_path: Path) -> None:
    token = "serve-test-token-0123456789"
    (tmp_path / "token").write_text(token)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(Path(sys.executable).parent / "trialground"), "sandbox", "serve", "--port", str(port)]
    cmd += ["--token-file", str(tmp_path / "token"), "--max-body-mb", "1"]
    proc = subprocess.Popen(cmd, env={**os.environ})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/health")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert httpx.post(f"{url}/sessions", json={}).status_code == 401
        headers = {"Authorization": f"Bearer {token}"}
        sid = httpx.post(f"{url}/sessions", json={}, headers=headers).json()["session_id"]
        r = httpx.post(f"{url}/sessions/{sid}/exec", json={"cmd": ["echo", "hi"]}, headers=headers).json()
        assert r["stdout"] == "hi\n"
        big = {"cmd": ["echo", "x" * (2 << 20)]}
        r = httpx.post(f"{url}/sessions/{sid}/exec", json=big, headers=headers)
        assert r.status_code == 413 and "at most 1048576 bytes" in r.json()["detail"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
