"""The Python snippets of docs/sandbox_fusion.md and docs/openenv.md, run exactly as written (a fresh
interpreter each) against real servers started as the pages say (on port 0), and their output compared
with the output the page shows after them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from interop_servers import serve

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

DOCS = Path(__file__).resolve().parents[2] / "docs"
TOKEN = "docs-snippet-token-0123456789"
SNIPPET = re.compile(r"```python\n(.*?)```\n\nprints\n\n```\n(.*?)```", re.S)


def snippets(page: str) -> list[tuple[str, str]]:
    found = SNIPPET.findall((DOCS / page).read_text())
    assert found, f"{page} has no Python snippet followed by its output"
    return found


def run_snippet(code: str, env: dict[str, str]) -> str:
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_sandbox_fusion_page(tmp_path: Path) -> None:
    pytest.importorskip("sandbox_fusion")
    (tmp_path / "token").write_text(TOKEN)
    args = ["sandbox", "serve", "--host", "127.0.0.1", "--port", "0", "--token-file", str(tmp_path / "token")]
    with serve(args) as server:
        for code, expected in snippets("sandbox_fusion.md"):
            assert run_snippet(code, {"SANDBOX_FUSION_ENDPOINT": f"{server.url}/sf/{TOKEN}"}) == expected


def test_openenv_page(tmp_path: Path) -> None:
    pytest.importorskip("openenv")
    (tmp_path / "token").write_text(TOKEN)
    args = ["env", "serve", "codegen", "--n", "3", "--host", "127.0.0.1", "--port", "0"]
    with serve([*args, "--token-file", str(tmp_path / "token")]) as server:
        for code, expected in snippets("openenv.md"):
            assert run_snippet(code, {"TRIALGROUND_ENV_URL": f"{server.url}/oe/{TOKEN}"}) == expected
