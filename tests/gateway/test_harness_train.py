"""`trialground train examples/harness.yaml`: the outside ReAct program (the `openai` SDK, no trialground
imports) drives the bundled agent policy through the gateway for a few real training steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap"),
]
ROOT = Path(__file__).resolve().parents[2]
VENV = str(Path(sys.executable).parent.parent)


def _train(
    tmp_path: Path, steps: int, env: dict[str, str] | None = None, **extra: str
) -> list[dict[str, float]]:
    sets = {
        "env.harness_dir": str(ROOT / "examples" / "harness"),
        "env.harness_venv": VENV,
        "loop.steps": str(steps),
        "loop.batch_tasks": "2",
        "loop.samples_per_task": "2",
        "loop.probe_interval": "0",
        "tasks.num_train": "40",
        "tasks.num_eval": "2",
        "output_dir": str(tmp_path),
        "name": "harness",
        **extra,
    }
    args = [arg for k, v in sets.items() for arg in ("--set", f"{k}={v}")]
    out = subprocess.run(
        [sys.executable, "-m", "trialground", "train", str(ROOT / "examples" / "harness.yaml"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=840,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in (tmp_path / "harness" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(900)
def test_the_harness_recipe_trains_through_the_outside_program(tmp_path: Path) -> None:
    rows = _train(tmp_path, 2)
    run = tmp_path / "harness"
    trained = [r for r in rows if "train/tokens" in r]
    assert [r["step"] for r in trained] == [1, 2]
    assert all(r["rollout/trajectories"] == 4 and r["train/tokens"] > 0 for r in trained)
    # the program called the model several times per episode, each call one policy turn of one trajectory
    assert all(r["rollout/turns_mean"] > 1.0 for r in trained), [r["rollout/turns_mean"] for r in trained]
    assert all(r["env/error_rate"] < 1.0 for r in trained)
    table = pq.read_table(run / "trajectories" / "step_1.parquet").to_pylist()
    assert len(table) == 4 and all(row["completion_tokens"] > 0 for row in table)
    assert all(row["finish_reason"] in ("exited", "exited_nonzero", "time_limit") for row in table), table


@pytest.mark.timeout(900)
def test_the_gateway_serves_the_harness_from_a_remote_inference_server(tmp_path: Path) -> None:
    """policy.backend=remote: the program's calls reach the gateway, which samples from a `policy serve`
    process over HTTP (token ids in and out), and the trainer's weights are pushed to it after each step."""
    import queue
    import threading

    import httpx

    key = "harness-remote-key"
    (tmp_path / "key").write_text(key)
    cmd = [sys.executable, "-m", "trialground", "policy", "serve", "--model", "tiny-agent", "--port", "0"]
    proc = subprocess.Popen(
        [*cmd, "--api-key-file", str(tmp_path / "key")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout
        threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
        first = lines.get(timeout=180)
        assert first.startswith("serving http://127.0.0.1:"), first
        url = first.split()[1]
        env = {**os.environ, "OPENAI_API_KEY": key}  # what the remote backend sends
        rows = _train(tmp_path, 1, env, **{"policy.backend": "remote", "policy.servers": f"[{url}]"})
        trained = [r for r in rows if "train/tokens" in r]
        assert [r["step"] for r in trained] == [1] and trained[0]["rollout/turns_mean"] > 1.0
        info = httpx.get(url + "/trialground/info", headers={"Authorization": f"Bearer {key}"}).json()
        assert info["requests"] > 0 and info["weight_loads"] == 2  # the starting weights, then step 1's
    finally:
        proc.terminate()
        proc.wait(60)
