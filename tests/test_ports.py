"""Every server has its own default port, and a port already in use is a one-line error, not a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from trialground.cli import app
from trialground.monitor.config import MonitorConfig
from trialground.ports import DEFAULT_PORTS, PROMETHEUS_PORT, listen


def _port_default(*path: str) -> int:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    (param,) = [p for p in command.params if p.name == "port"]
    assert isinstance(param.default, int)
    return param.default


def test_default_ports_are_pairwise_distinct_and_match_the_cli() -> None:
    defaults = {
        "env serve": _port_default("env", "serve"),
        "policy serve": _port_default("policy", "serve"),
        "sandbox serve": _port_default("sandbox", "serve"),
        "dashboard": _port_default("dashboard"),
        "prometheus": PROMETHEUS_PORT,
    }
    assert defaults == DEFAULT_PORTS
    assert len(set(defaults.values())) == len(defaults), defaults
    assert 8000 not in defaults.values()  # vLLM's default, which the remote backend and judges talk to
    # the exporter is off unless configured; its field names the documented port
    assert MonitorConfig().prometheus_port is None
    assert str(PROMETHEUS_PORT) in str(MonitorConfig.model_fields["prometheus_port"].description)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port held by a listening socket of this process for the test's duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        yield held.getsockname()[1]


def _write_run(run: Path) -> Path:
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "time": 1.0, "reward/mean": 0.2}) + "\n")
    return run


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


COMMANDS = {
    "sandbox serve": (["sandbox", "serve", "--token-file", "{token}"], ()),
    "env serve": (["env", "serve", "codegen", "--n", "1", "--token-file", "{token}"], ("websockets",)),
    "policy serve": (["policy", "serve", "--model", "tiny"], ("torch", "transformers")),
    "dashboard": (["dashboard", "{run}"], ("pyarrow", "scipy")),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_port_in_use_is_a_one_line_error(name: str, taken_port: int, tmp_path: Path) -> None:
    args, needs = COMMANDS[name]
    if not _has(*needs):
        pytest.skip(f"{name} needs {needs}")
    token = tmp_path / "token"
    token.write_text("t" * 32)
    run = _write_run(tmp_path / "run")
    argv = [a.format(token=token, run=run) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "trialground", *argv, "--host", "127.0.0.1", "--port", str(taken_port)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},  # a narrow terminal must not wrap the line
    )
    # docs/serving.md, Ports: a port in use ends the command with exit status 3 (an infrastructure failure)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert f"127.0.0.1:{taken_port}" in lines[0] and "already in use" in lines[0], lines[0]


def test_a_prometheus_port_in_use_names_the_setting(taken_port: int, tmp_path: Path) -> None:
    from trialground.errors import ConfigError
    from trialground.monitor.monitor import Monitor

    expected = rf"monitor.prometheus_port.*127.0.0.1:{taken_port}.*already in use"
    with pytest.raises(ConfigError, match=expected):
        Monitor(tmp_path, MonitorConfig(console=False, prometheus_port=taken_port))


def _free(port: int) -> bool:
    try:
        listen("127.0.0.1", port).close()
    except OSError:
        return False
    return True


def _first_url(proc: subprocess.Popen[str], deadline: float) -> str | None:
    """The first http URL the server prints on stdout, or None if it exits or the deadline passes."""
    import re
    import select

    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                return None
            found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if found:
                return found.group(0)
        elif proc.poll() is not None:
            return None
    return None


def test_servers_started_at_once_on_their_defaults_all_come_up(tmp_path: Path) -> None:
    """Side by side, each server on its default port (where the machine leaves it free: a default some
    other process holds is swapped for port 0 and named in the skip reason when nothing is left to test)."""
    token = tmp_path / "token"
    token.write_text("t" * 32)
    run = _write_run(tmp_path / "run")
    chosen = {n: c for n, c in COMMANDS.items() if n != "policy serve" and _has(*c[1])}  # no model load
    busy = sorted(n for n in chosen if not _free(DEFAULT_PORTS[n]))
    if len(chosen) < 2:
        pytest.skip(f"fewer than two servers can run here: {sorted(chosen)}")
    procs: dict[str, subprocess.Popen[str]] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    try:
        for name, (args, _) in chosen.items():
            argv = [a.format(token=token, run=run) for a in args]
            port = ["--port", "0"] if name in busy else []  # else: no --port, the default
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "trialground", *argv, *port],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        deadline = time.monotonic() + 240
        urls = {name: _first_url(proc, deadline) for name, proc in procs.items()}
        for name, url in urls.items():
            if url is None:
                procs[name].kill()
                _, err = procs[name].communicate(timeout=30)
                pytest.fail(f"{name} did not come up: {err[-2000:]}")
        ports = {name: int(str(url).rsplit(":", 1)[1]) for name, url in urls.items()}
        assert len(set(ports.values())) == len(ports), ports
        for name, port in ports.items():
            if name not in busy:
                assert port == DEFAULT_PORTS[name], (name, port)
            socket.create_connection(("127.0.0.1", port), timeout=10).close()  # it accepts connections
        if len(chosen) - len(busy) < 2:
            pytest.skip(f"defaults held by other processes on this machine: {busy}; the rest came up")
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
