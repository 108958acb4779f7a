"""Every ```python and ```bash block of the integration docs runs as written, in document order, in one
fresh directory per page (```text blocks are syntax, not commands). Python blocks run in this process
(`runpy`, as `__main__`: no second import of torch and TRL), bash blocks in bash. The verifiers page gets
a scripted OpenAI-compatible server in OPENAI_BASE_URL, standing in for the user's model server."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scripted_openai import ScriptedOpenAI

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks(page: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer((ROOT / "docs" / page).read_text())]


def run_page(
    page: str, cwd: Path, monkeypatch: pytest.MonkeyPatch, **env: str
) -> list[tuple[str, dict[str, Any]]]:
    """(stdout, the block's globals; {} for bash) of every block, in order."""
    found = blocks(page)
    assert found, f"docs/{page} has no runnable snippet"
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cwd / "hf-cache"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    results: list[tuple[str, dict[str, Any]]] = []
    for i, (lang, code) in enumerate(found):
        if lang == "python":
            script = cwd / f"snippet_{i}.py"
            script.write_text(code)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                namespace = runpy.run_path(str(script), run_name="__main__")
            results.append((out.getvalue(), namespace))
        else:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True, timeout=240
            )
            assert done.returncode == 0, f"docs/{page} block {i} failed:\n{code}\n{done.stderr[-3000:]}"
            results.append((done.stdout, {}))
    return results


@pytest.mark.slow
def test_trl_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    pytest.importorskip("trl")
    (out1, ns1), (_, ns2) = run_page("trl.md", tmp_path, monkeypatch, TRL_EXPERIMENTAL_SILENCE="1")
    assert ns1["trainer"].state.global_step == 2 and "rewards/trialground/mean" in out1
    assert len(ns1["reward"].last) == 4
    assert ns2["trainer"].state.global_step == 2
    assert len(ns2["envs"].finished) == 8  # every rollout of both steps graded by get_reward


@pytest.mark.slow
def test_verifiers_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(pytest.importorskip("verifiers"), "SingleTurnEnv"):
        pytest.skip("the page's snippets use verifiers' classic API (0.2.1)")
    # every prompt gets the same (wrong) program: a real completion, really graded
    with ScriptedOpenAI({}, default="```python\ndef f(xs):\n    return xs\n```") as server:
        (out1, ns1), (out2, _) = run_page(
            "verifiers.md", tmp_path, monkeypatch, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="x"
        )
    import asyncio

    asyncio.run(ns1["env"].rubric.teardown())
    rows = [line.split() for line in out1.splitlines()]
    assert len(rows) == 8 and all(float(reward) == 0.0 and float(passed) == 0.0 for _, reward, passed in rows)
    assert "trialground_dropped" in out2
    assert len(server.requests) == 8 + 8


def test_hf_datasets_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasets")
    (listed, _), (opened, _), (_, ns), (code, _) = run_page("hf_datasets.md", tmp_path, monkeypatch)
    assert len(listed.splitlines()) == 6
    assert "'verifier'" in opened and "code_tests" in opened
    assert [(t.split, t.verifier.params["answer"]) for t in ns["tasks"]] == [("train", 42.0), ("eval", 4.0)]
    assert code.splitlines() == [
        "eval code_tests {'solution_path': 'solution.py', 'expected_tests': 2, 'entry_point': 'remove_Occ'}"
    ]
