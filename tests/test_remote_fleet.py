"""The agent recipe against two real `policy serve` processes (kernel-picked ports): both serve episodes,
no episode's turns move between them while both live, and killing one mid-run loses no step."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from trialground.orchestrator.run_config import load_config

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # two server processes and two agent steps

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "agent.yaml"
KEY = "fleet-test-key"


def _start(key_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "trialground", "policy", "serve", "--model", "tiny-agent", "--port", "0"),
            *("--api-key-file", str(key_file)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _url(proc: subprocess.Popen[str]) -> str:
    lines: queue.Queue[str] = queue.Queue()
    out = proc.stdout
    assert out is not None
    threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=600)  # torch and the model load slowly on a busy 2-core machine
    except queue.Empty:
        proc.kill()
        raise AssertionError("policy serve printed nothing within 600 s") from None
    assert first.startswith("serving http://"), first
    return first.split()[1]


@pytest.mark.timeout(900)  # two model-loading processes and a run of the agent recipe on a busy machine
def test_episodes_stick_to_their_server_and_a_dead_one_loses_no_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trialground.orchestrator.loop import run
    from trialground.policy.backends.remote.remote import RemotePolicy

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    procs = [_start(key_file) for _ in range(2)]  # both load at once
    calls: list[tuple[tuple[int, ...], str, list[tuple[int, ...]], bool]] = []  # prompt, server, contexts
    killed: list[str] = []
    real = RemotePolicy._complete

    async def spy(self: RemotePolicy, client: Any, prompt: list[int], *args: Any) -> Any:
        server, choices = await real(self, client, prompt, *args)
        contexts = [tuple(prompt) + tuple(c["token_ids"]) for c in choices]
        calls.append((tuple(prompt), server, contexts, bool(killed)))
        return server, choices

    monkeypatch.setattr(RemotePolicy, "_complete", spy)
    try:
        urls = [_url(p) for p in procs]
        cfg = load_config(
            AGENT,
            [
                "loop.steps=2",
                "loop.eval_interval=0",
                "loop.checkpoint_interval=0",
                "loop.batch_tasks=2",
                "loop.samples_per_task=4",
                "tasks.num_train=40",
                "tasks.num_eval=4",
                "policy.backend=remote",
                f"policy.servers=[{urls[0]}, {urls[1]}]",
                f"output_dir={tmp_path}",
                "name=fleet",
            ],
        )

        def kill_after_first_step(step: int, _metrics: dict[str, float]) -> None:
            if step == 1:
                os.kill(procs[0].pid, signal.SIGKILL)
                procs[0].wait(30)
                killed.append(urls[0])

        summary = asyncio.run(run(cfg, progress=kill_after_first_step))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
    assert summary.steps == 2
    lines = (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()
    trained = [json.loads(x) for x in lines if x and "train/loss" in json.loads(x)]
    assert [m["step"] for m in trained] == [1, 2]  # the dead server cost no step
    before = [c for c in calls if not c[3]]
    assert {server for _, server, _, _ in before} == set(urls)  # both served episodes
    later_turns = 0
    for i, (prompt, server, _, after_kill) in enumerate(calls):
        # the longest earlier context this prompt extends: the episode's previous turn
        earlier = [(len(ctx), s) for p, s, ctxs, _ in calls[:i] for ctx in ctxs if prompt[: len(ctx)] == ctx]
        if not earlier:
            continue
        later_turns += 1
        # Samples of one task can leave the very same context on both servers (a peaked policy samples the
        # same turn twice); the prefix cache of either holds it, so the turn may go to any of its holders.
        longest = max(n for n, _ in earlier)
        holders = {s for n, s in earlier if n == longest}
        live = holders - set(killed) if after_kill else holders
        if live:
            assert server in live, (i, server, holders)  # no turn moved between live servers
        else:
            assert server not in holders  # the episode moved off the dead server
    assert later_turns > 0  # multi-turn episodes were checked
