"""`openenv validate` (openenv-core's own command line) accepts trialground's environment: the OpenEnv
environment directory `deploy/trialground_env` (manifest, package, lock file, server entry point), and a
running server started by that directory's entry point and by `trialground env serve`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from interop_servers import serve

pytest.importorskip("openenv")

ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = ROOT / "deploy" / "trialground_env"
OPENENV = str(Path(sys.executable).parent / "openenv")
TOKEN = "openenv-validate-token-0123456789"
# the servers import this checkout's trialground, whichever the environment has installed
CHECKOUT = {"PYTHONPATH": str(ROOT)}


def validate(target: str, *extra: str) -> tuple[int, dict]:
    done = subprocess.run(
        [OPENENV, "validate", target, *extra], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    return done.returncode, json.loads(done.stdout)


def test_the_environment_directory_validates() -> None:
    rc, report = validate(str(ENV_DIR), "--json", "--verbose")
    assert rc == 0 and report["passed"], report["issues"]
    assert report["environment"] == "trialground" and report["issues"] == []
    modes = report["deployment_modes"]
    assert modes["uv_run"] and modes["python_module"] and modes["openenv_serve"]


@pytest.mark.parametrize("how", ["env serve", "manifest entry point"])
def test_a_running_server_validates(tmp_path: Path, how: str) -> None:
    (tmp_path / "token").write_text(TOKEN)
    options = ["--port", "0", "--token-file", str(tmp_path / "token"), "--n", "2"]
    if how == "env serve":
        command, args, env = [sys.executable, "-m", "trialground"], ["env", "serve", "codegen", *options], {}
    else:  # what `uv run --project deploy/trialground_env server --port P` runs
        command, args = [sys.executable, str(ENV_DIR / "server" / "app.py")], options
        env = {"TRIALGROUND_ENV_SOURCE": "agent"}
    with serve(args, command=command, env={**CHECKOUT, **env}) as server:
        base = f"{server.url}/oe/{TOKEN}"
        rc, report = validate(base)
        assert rc == 0 and report["passed"], report
        assert report["standard_profile"] == "openenv-http/1.x" and report["mode"] == "simulation"
        assert report["summary"]["failed_criteria"] == []
        # the MCP route answers JSON-RPC: malformed requests and MCP tool calls get JSON-RPC errors
        mcp = httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).json()
        assert mcp["id"] == 7 and mcp["error"]["code"] == -32603
        assert "does not support MCP" in mcp["error"]["message"]
        assert httpx.post(f"{base}/mcp", content=b"{").json()["error"]["code"] == -32700
        # the token guards it as every other route
        assert httpx.post(f"{server.url}/mcp", json={}).status_code == 401
        metadata = httpx.get(f"{base}/metadata").json()
        expected = "2 tasks" if how == "env serve" else "tasks"
        assert expected in metadata["description"]


def test_the_manifest_app_is_the_same_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """`server.app:app` (what ASGI hosts import) builds the server from the environment variables."""
    from fastapi.testclient import TestClient

    monkeypatch.syspath_prepend(str(ENV_DIR))
    monkeypatch.setenv("TRIALGROUND_ENV_SOURCE", "codegen")
    monkeypatch.setenv("TRIALGROUND_ENV_N", "3")
    monkeypatch.setenv("TRIALGROUND_ENV_TOKEN", TOKEN)
    import server.app as entry

    try:
        with TestClient(entry.app) as client:
            assert (
                "over 3 tasks"
                in client.get("/metadata", headers={"Authorization": f"Bearer {TOKEN}"}).json()["description"]
            )
            assert client.get("/metadata").status_code == 401
    finally:
        sys.modules.pop("server.app", None)
        sys.modules.pop("server", None)
