"""Decoupled sampling and training end to end: the quickstart trains with its policy served over HTTP by
two `trialground policy serve` processes (real processes, loopback HTTP, port 0)."""

from __future__ import annotations

import asyncio
import json
import math
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from trialground.orchestrator.run_config import load_config

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SMALL = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.batch_tasks=2",
    "loop.samples_per_task=4",
    "loop.checkpoint_interval=1",
    "tasks.num_train=50",
    "tasks.num_eval=4",
    "policy.sampling.max_new_tokens=24",
    "policy.eval_sampling.max_new_tokens=24",
    "sandbox.limits.wall_s=60",
    "reward.grading.test_timeout_s=60",
    "reward.grading.total_timeout_s=300",
    # the trainer recomputes every old logprob and reports how far the servers' were from it
    "trainer.old_logprobs=recompute",
    "trainer.skip_zero_advantage=false",
]


KEY = "policy-serve-test-key"  # weight pushes need the servers' key; the remote backend sends $OPENAI_API_KEY
AUTH = {"Authorization": f"Bearer {KEY}"}


def _start(key_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "trialground", "policy", "serve", "--model", "tiny", "--port", "0"),
            *("--api-key-file", str(key_file)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _url(proc: subprocess.Popen[str]) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=180)  # loads torch and the model; generous on a busy machine
    except queue.Empty:
        proc.kill()
        raise AssertionError("policy serve printed nothing within 180 s") from None
    assert first.startswith("serving http://127.0.0.1:"), first
    return first.split()[1]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # what the remote backend sends


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    key_file = tmp_path_factory.mktemp("key") / "key"
    key_file.write_text(KEY)
    procs = [_start(key_file) for _ in range(2)]  # both load at once
    try:
        yield [_url(p) for p in procs]
    finally:
        for proc in procs:
            proc.terminate()
        assert [p.wait(60) for p in procs] == [0, 0]  # SIGTERM is a clean stop


def _checkpoint_weights(step_dir: Path) -> dict[str, Any]:
    if (step_dir / "model.pt").is_file():
        state: dict[str, Any] = torch.load(step_dir / "model.pt", map_location="cpu", weights_only=True)
        return state
    from trialground.policy.weight_files import read_weights

    return read_weights(step_dir / "hf")


def test_quickstart_trains_through_two_policy_servers(
    servers: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trialground.orchestrator.loop import run
    from trialground.policy.backends.remote.remote import RemotePolicy
    from trialground.policy.weight_files import tensor_digest

    seen: list[Any] = []
    real_generate = RemotePolicy.generate

    async def spy(self: RemotePolicy, prompts: Any, params: Any) -> Any:  # records, changes nothing
        gens = await real_generate(self, prompts, params)
        seen.extend(gens)
        return gens

    monkeypatch.setattr(RemotePolicy, "generate", spy)
    cfg = load_config(
        QUICKSTART,
        [
            *SMALL,
            "policy.backend=remote",
            f"policy.servers=[{servers[0]}, {servers[1]}]",
            f"policy.weight_dir={tmp_path / 'weights'}",
            f"output_dir={tmp_path}",
            "name=served",
        ],
    )
    summary = asyncio.run(run(cfg))
    assert summary.steps == 2
    run_dir = Path(summary.run_dir)
    # every sampled token (training and evaluation) came with a finite sampling logprob
    assert len(seen) >= 2 * 2 * 4
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in seen)
    assert all(math.isfinite(x) for g in seen for x in g.logprobs)
    assert {g.version for g in seen} == {0, 1, 2}  # eval before (0), step 2 (1), eval after (2)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    trained = [m for m in metrics if "train/loss" in m]
    assert len(trained) == 2
    for m in trained:
        assert math.isfinite(m["train/loss"])
        # the servers' logprobs are the trainer's own up to float error
        assert 0.0 <= m["train/sampler_logprob_diff"] < 1e-3, m
        assert m["mismatch/kl_k3"] < 1e-5 and abs(m["mismatch/ratio_p50"] - 1.0) < 1e-3, m
    info = [httpx.get(url + "/trialground/info", headers=AUTH).json() for url in servers]
    assert [i["weight_loads"] for i in info] == [3, 3]  # the starting weights, then one push per step
    assert all(i["requests"] > 0 for i in info)  # both servers sampled
    # what the servers hold now is exactly the trainer's weights after the last step
    final = {k: tensor_digest(v) for k, v in _checkpoint_weights(run_dir / "checkpoints" / "step_2").items()}
    for url in servers:
        served = httpx.post(url + "/weight_checker", json={"action": "checksum"}, headers=AUTH).json()[
            "checksums"
        ]
        assert served == final
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v00000001", "v00000002"]


def test_async_mode_trains_through_the_servers(servers: list[str], tmp_path: Path) -> None:
    """Pushes arrive while the other batch is generating: nothing hangs, every step trains."""
    from trialground.orchestrator.loop import run

    before = [httpx.get(url + "/trialground/info", headers=AUTH).json()["weight_loads"] for url in servers]
    cfg = load_config(
        QUICKSTART,
        [
            *SMALL,
            "loop.mode=async",
            "loop.max_staleness=1",
            "policy.backend=remote",
            f"policy.servers=[{servers[0]}, {servers[1]}]",
            f"output_dir={tmp_path}",
            "name=served_async",
        ],
    )
    summary = asyncio.run(run(cfg))
    assert summary.steps == 2
    metrics = [
        json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()
    ]
    trained = [m for m in metrics if "train/loss" in m]
    assert len(trained) == 2 and all(math.isfinite(m["train/loss"]) for m in trained)
    # the first step trains on samples of the weights it starts from; later ones may be a version stale
    assert trained[0]["train/sampler_logprob_diff"] < 1e-3, trained[0]
    assert all(math.isfinite(m["train/sampler_logprob_diff"]) for m in trained)
    assert max(m["async/staleness_max"] for m in metrics if "async/staleness_max" in m) <= 1
    after = [httpx.get(url + "/trialground/info", headers=AUTH).json()["weight_loads"] for url in servers]
    # the starting weights (the servers held the previous run's), then one push per step
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 3]


def test_a_top_k_sampler_shows_the_mismatch_and_the_correction_weighs_it(
    servers: list[str], tmp_path: Path
) -> None:
    """The servers sample top-k 3 (stated in every request); the trainer scores the full softmax: the run
    reports the mismatch, and with `trainer.is_correction: token_truncate` its ratio metrics."""
    from trialground.orchestrator.loop import run

    cfg = load_config(
        QUICKSTART,
        [
            *SMALL,
            "loop.steps=1",
            "loop.checkpoint_interval=0",
            "policy.backend=remote",
            "policy.sampling.top_k=3",
            "trainer.is_correction=token_truncate",
            f"policy.servers=[{servers[0]}, {servers[1]}]",
            f"output_dir={tmp_path}",
            "name=served_top_k",
        ],
    )
    summary = asyncio.run(run(cfg))
    lines = (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()
    (m,) = [json.loads(x) for x in lines if x and "train/loss" in json.loads(x)]
    # renormalised over 3 tokens, the sampler gives each token more than the full softmax does
    assert m["mismatch/kl_k3"] > 1e-4, m
    assert m["mismatch/ratio_max"] <= 1.0 + 1e-4 and m["mismatch/ratio_p05"] < 1.0 - 1e-3, m
    assert m["mismatch/flagged_frac"] == 0.0  # nothing above the cap of 2 to truncate
    assert m["train/sampler_logprob_diff"] > 1e-3


def test_a_server_killed_mid_run_is_dropped_and_the_run_finishes(tmp_path: Path) -> None:
    """One of two servers killed by its pid after the first step: requests fail over to the other, the
    dead one is dropped at the next weight push, and the run trains every step."""
    import os
    import signal

    from trialground.orchestrator.loop import run

    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    procs = [_start(key_file) for _ in range(2)]
    try:
        urls = [_url(p) for p in procs]
        cfg = load_config(
            QUICKSTART,
            [
                *SMALL,
                "loop.steps=3",
                "policy.backend=remote",
                f"policy.servers=[{urls[0]}, {urls[1]}]",
                f"output_dir={tmp_path}",
                "name=failover",
            ],
        )
        before: list[int] = []

        def kill_after_first_step(step: int, _metrics: dict[str, float]) -> None:
            if step == 1:
                before.append(httpx.get(urls[1] + "/trialground/info", headers=AUTH).json()["requests"])
                os.kill(procs[0].pid, signal.SIGKILL)
                procs[0].wait(30)

        summary = asyncio.run(run(cfg, progress=kill_after_first_step))
        assert summary.steps == 3 and before
        info = httpx.get(urls[1] + "/trialground/info", headers=AUTH).json()
        assert info["weight_loads"] == 4  # the starting weights and one push per step
        assert info["requests"] > before[0]  # the survivor answered what the dead one would have
        run_dir = Path(summary.run_dir)
        trained = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
        assert [m["step"] for m in trained if "train/loss" in m] == [1, 2, 3]
        assert all(m["env/error_rate"] == 0.0 for m in trained if "env/error_rate" in m)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
