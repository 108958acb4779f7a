"""A Ray sandbox worker killed by its pid in the middle of a real run: the episodes it held start again on
a live worker, none is lost, and the run counts them (`env/episodes_retried`, `pool/ray/workers_lost`)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from loopkit import code_task, config, parquet_rows, tool_call, trained_rows

pytest.importorskip("torch")
ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _busy_workers(marker: str) -> list[int]:
    """The Ray sandbox worker above each process with `marker` in its command line (one entry per process)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not _cmdline(int(entry)).startswith(marker):
            continue
        pid = int(entry)
        while pid > 1:
            if _cmdline(pid).startswith("ray::SandboxWorker"):
                found.append(pid)
                break
            pid = _parent(pid)
    return found


def _kill_a_busy_worker(marker: str, killed: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        busy = _busy_workers(marker)
        if len(busy) >= 2:  # the training step's episodes (the first evaluation runs one at a time)
            pid = busy[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.05)


@pytest.mark.timeout(900)
def test_a_worker_killed_mid_run_loses_no_episode(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    tasks = [code_task("train", n, tool=True) for n in ("a", "b")] + [code_task("eval", "e", tool=True)]
    marker = "sleep 2.5"  # every tool call sleeps: the kill lands while episodes are inside the worker
    script = [tool_call("bash", command=f"{marker}; echo done")]  # a bash whose child is `sleep 2.5`
    opts = [
        "loop.steps=1", "env.kind=tool", "env.max_turns=2", "sandbox.limits.wall_s=60",
        "env.tool_timeout_s=60", "env.max_episode_s=300", "cluster=ray", "pool.ray_workers=2",
        "pool.ray_worker_cpus=0.5", "name=ray_faults", "loop.probe_interval=0", "tasks.num_eval=1",
    ]  # fmt: skip
    cfg = config(tmp_path, tasks, script, *opts)
    killed: list[int] = []
    stop = threading.Event()
    # the first evaluation runs its episode first; the kill waits for the training step's episodes
    killer = threading.Thread(target=_kill_a_busy_worker, args=(marker, killed, stop), daemon=True)
    killer.start()
    try:
        summary = asyncio.run(run(cfg))
    finally:
        stop.set()
        killer.join(timeout=5)
    assert killed, "no worker was busy to kill"
    rows = trained_rows(Path(summary.run_dir))
    lost = rows[-1]["pool/ray/workers_lost"]
    retried = sum(r["env/episodes_retried"] for r in rows)
    assert lost >= 1 and retried >= 1, (lost, retried)
    trained = [r for r in rows if "env/error_rate" in r]
    assert all(r["env/error_rate"] == 0.0 for r in trained)  # every episode ended, none lost
    episodes = parquet_rows(Path(summary.run_dir), 1)
    assert len(episodes) == 8 and all(e["error_kind"] is None for e in episodes)
