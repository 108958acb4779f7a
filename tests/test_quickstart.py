"""The walking skeleton end to end: real tasks, real bwrap sandboxes, the real tiny model, real updates."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trialground.hugepages import hugepage_reason
from trialground.orchestrator.run_config import load_config

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SMALL = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.batch_tasks=2",
    "loop.samples_per_task=4",
    "tasks.num_train=50",
    "tasks.num_eval=4",
    "policy.sampling.max_new_tokens=24",
    "policy.eval_sampling.max_new_tokens=24",
    # These tests compare rewards between runs: a grading deadline that a busy machine (other processes'
    # CPU work) can miss would make one run's verdict differ. CPU time (cpu_s) still bounds a spinning
    # completion; only the wall-clock deadlines get room.
    "sandbox.limits.wall_s=60",
    "reward.grading.test_timeout_s=60",
    "reward.grading.total_timeout_s=300",
]

pytestmark = pytest.mark.slow


def small_config(tmp_path: Path, name: str, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(QUICKSTART, [*SMALL, f"output_dir={tmp_path}", f"name={name}", *extra])


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_walking_skeleton_leaves_a_complete_run_dir(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    cfg = small_config(tmp_path, "skeleton")
    summary = asyncio.run(run(cfg))
    run_dir = Path(summary.run_dir)
    assert summary.steps == 2
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "alerts.jsonl").is_file()
    metrics = read_metrics(run_dir)
    steps = [m["step"] for m in metrics]
    assert steps[-2:] == [1, 2]
    last = metrics[-1]
    for key in ("reward/mean", "train/loss", "env/error_rate", "eval/pass@1", "rollout/response_len_mean"):
        assert key in last, key
    assert all("/" in k for k in last if k not in ("step", "time"))
    table = pq.read_table(run_dir / "trajectories" / "step_1.parquet").to_pylist()
    assert len(table) == 2 * 4
    assert all(row["error_kind"] is None for row in table), table
    assert all(row["reward"] is not None and row["policy_version"] == 0 for row in table)
    assert (run_dir / "checkpoints" / "step_2" / "meta.json").is_file()
    assert summary.eval_before is not None and summary.eval_after is not None
    # the held-out episodes of the first and last evaluations, apart from what training saw
    for step, key in ((0, "eval/pass@1"), (2, "eval/pass@1")):
        held = pq.read_table(run_dir / "evaluations" / f"eval_step_{step}.parquet").to_pylist()
        assert len(held) == 4 and {r["step"] for r in held} == {step}
        assert all(r["advantage"] is None and r["completion"] for r in held)
        logged = next(m[key] for m in metrics if m["step"] == step and key in m)
        assert sum(r["outcome"] == 1.0 for r in held) / 4 == pytest.approx(logged)


def _train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "trialground", "train", *args]


@pytest.mark.timeout(1800)  # three runs of the quickstart's cadence: 15 + 10 + 5 steps on a busy machine
def test_resume_after_kill_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    """Durable by default: the quickstart's own checkpoint cadence (no checkpoint setting given) leaves a
    checkpoint that a run killed with SIGKILL resumes from, to the same result as an uninterrupted run."""
    overrides = [*SMALL, "loop.steps=15", f"output_dir={tmp_path}"]
    sets = [a for o in overrides for a in ("--set", o)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight = subprocess.run(
        _train_cmd(str(QUICKSTART), *sets, "--set", "name=straight"), env=env, capture_output=True, text=True
    )
    assert straight.returncode == 0, straight.stderr[-3000:]

    killed_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        _train_cmd(str(QUICKSTART), *sets, "--set", "name=killed"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while not (killed_dir / "checkpoints" / "step_10" / "meta.json").exists():  # the default interval
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # at once: five steps (>= 1 s) were still to run
    proc.wait()
    assert not (killed_dir / "checkpoints" / "step_15").exists(), "the run finished before the kill"

    resumed = subprocess.run(_train_cmd("--resume", str(killed_dir)), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    a, b = read_metrics(tmp_path / "straight"), read_metrics(killed_dir)
    assert [m["step"] for m in a] == [m["step"] for m in b]
    # `trialground train` re-executed itself with huge pages for its heap where the machine allows it (the
    # kill above reached the re-executed process: same pid, same session)
    assert a[0]["system/heap_hugepages"] == (0.0 if hugepage_reason(env) else 1.0)
    for ma, mb in zip(a, b, strict=True):
        assert ma.get("reward/mean") == mb.get("reward/mean"), (
            ma["step"],
            ma.get("reward/mean"),
            mb.get("reward/mean"),
        )
    for step in range(1, 16):
        ta = pq.read_table(tmp_path / "straight" / "trajectories" / f"step_{step}.parquet").column(
            "completion"
        )
        tb = pq.read_table(killed_dir / "trajectories" / f"step_{step}.parquet").column("completion")
        assert ta.to_pylist() == tb.to_pylist(), step
    wa = torch.load(tmp_path / "straight" / "checkpoints" / "step_15" / "model.pt", weights_only=True)
    wb = torch.load(killed_dir / "checkpoints" / "step_15" / "model.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    kept = sorted(p.name for p in (killed_dir / "checkpoints").iterdir())
    assert kept == ["step_10", "step_15"], kept  # the default keeps the newest 3


def test_a_policy_in_a_child_process_trains_exactly_like_one_in_process(tmp_path: Path) -> None:
    """`policy.separate_process`: the same run (sync, same seed) samples the same completions, earns the
    same rewards and ends with the same weights; the child is gone when the run returns."""
    from trialground.orchestrator.loop import run

    for name, flag in (("inproc", "false"), ("child", "true")):
        asyncio.run(run(small_config(tmp_path, name, f"policy.separate_process={flag}")))
    assert _policy_children() == []
    a, b = read_metrics(tmp_path / "inproc"), read_metrics(tmp_path / "child")
    for key in ("reward/mean", "train/loss", "eval/pass@1"):
        assert [m.get(key) for m in a] == [m.get(key) for m in b], key
    for step in (1, 2):
        ta = pq.read_table(tmp_path / "inproc" / "trajectories" / f"step_{step}.parquet")
        tb = pq.read_table(tmp_path / "child" / "trajectories" / f"step_{step}.parquet")
        assert ta.column("completion").to_pylist() == tb.column("completion").to_pylist(), step
        assert tb.column("policy_version").to_pylist() == [step - 1] * tb.num_rows
    wa = torch.load(tmp_path / "inproc" / "checkpoints" / "step_2" / "model.pt", weights_only=True)
    wb = torch.load(tmp_path / "child" / "checkpoints" / "step_2" / "model.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def _policy_children() -> list[int]:
    """Pids of this process's children that run the generation process."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"trialground.policy.backends.hf.hf_process" in cmdline:
            found.append(int(entry.name))
    return found
