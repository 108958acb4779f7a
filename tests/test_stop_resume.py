"""A run's stops, as a user meets them: killed before its first checkpoint, Ctrl-C (SIGINT), SIGTERM (what
Slurm sends). Each ends with the command that continues it, and that command continues it: the finished
run's metrics hold every step exactly once."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trialground.cli import app
from trialground.cli.stopping import where_stopped
from trialground.orchestrator.preflight import occupied

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
TINY = [
    "loop.steps=7", "loop.eval_interval=0", "loop.probe_interval=0", "loop.batch_tasks=2",
    "loop.samples_per_task=2", "tasks.num_train=20", "tasks.num_eval=2",
    "policy.sampling.max_new_tokens=16", "policy.eval_sampling.max_new_tokens=16",
    "loop.checkpoint_interval=10", "loop.checkpoint_every_s=0",  # no checkpoint before the last step
    "monitor.log_interval=2",
]  # fmt: skip
COMMAND = re.compile(r"`?(trialground train --resume \S+?)`?(?:,|$)", re.M)


def _steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


def _start(argv: list[str]) -> subprocess.Popen[str]:
    """`trialground ARGV` in a session of its own, as a terminal's foreground job is a process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "trialground", *argv],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _signal_after(proc: subprocess.Popen[str], run_dir: Path, step: int, sig: int) -> str:
    """Send `sig` to the whole process group once `metrics.jsonl` holds `step`; the output."""
    deadline = time.monotonic() + 600
    while not (run_dir / "metrics.jsonl").is_file() or max(_steps(run_dir), default=-1) < step:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=600)
    return out


def _command(output: str) -> list[str]:
    """The continue command the output names, as argv after `trialground`."""
    found = COMMAND.findall(output)
    assert len(found) == 1, output[-3000:]
    argv = shlex.split(found[0])
    assert argv[:3] == ["trialground", "train", "--resume"]
    return argv[1:]


@pytest.mark.slow  # four `trialground train` processes (each imports torch and loads the tiny model)
@pytest.mark.timeout(1200)
def test_killed_interrupted_and_terminated_runs_continue_with_the_command_they_print(tmp_path: Path) -> None:
    sets = [a for kv in [*TINY, f"output_dir={tmp_path}", "name=life"] for a in ("--set", kv)]
    run_dir = tmp_path / "life"
    first = ["train", str(QUICKSTART), *sets]

    # SIGKILL at step 2, before the first checkpoint: the same command refuses and names the way on
    _signal_after(_start(first), run_dir, 2, signal.SIGKILL)
    assert not list((run_dir / "checkpoints").glob("step_*"))
    again = CliRunner().invoke(app, first)  # refused before anything loads: in this process
    assert again.exit_code == 2, again.output
    assert "--overwrite" in again.output and "continues from step 0" in again.output
    command = _command(again.output)

    # Ctrl-C (to the whole foreground group, as a terminal sends it) during step 3 of the continued run
    out = _signal_after(_start(command), run_dir, 3, signal.SIGINT)
    assert "Traceback" not in out, out[-3000:]
    assert "stopped after step" in out and "(checkpointed)" in out, out[-3000:]
    stopped = max(_steps(run_dir))
    assert 3 <= stopped < 7 and (run_dir / "checkpoints" / f"step_{stopped}" / "meta.json").is_file()
    command = _command(out)

    # SIGTERM, as Slurm sends it to every process of the job
    proc = _start(command)
    out = _signal_after(proc, run_dir, stopped + 1, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    command = _command(out)

    done = subprocess.run(
        [sys.executable, "-m", "trialground", *command], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # no terminal: one plain line every monitor.log_interval steps and at the last
    last = re.search(r"^step 7/7  reward .* elapsed \S+  eta 0:00:00$", done.stderr, re.M)
    assert last, done.stderr[-3000:]
    assert _steps(run_dir) == list(range(8))  # step 0 (the starting evaluation) to 7, each once
    trained = sorted(int(p.stem.split("_")[1]) for p in (run_dir / "trajectories").glob("step_*.parquet"))
    assert trained == list(range(1, 8))


def test_a_stopped_runs_messages_name_its_state_and_the_ways_on(tmp_path: Path) -> None:
    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("name: r\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(4)))
    assert "before its first checkpoint (a resumed run starts from step 0)" in where_stopped(run)
    message = occupied(run)
    assert f"trialground train --resume {run}" in message and "--overwrite" in message
    assert "continues from step 0" in message
    ckpt = run / "checkpoints" / "step_3"
    ckpt.mkdir()
    (ckpt / "meta.json").write_text(json.dumps({"step": 3}))
    assert where_stopped(run) == "stopped after step 3 (checkpointed)"
    assert "checkpointed at step 3" in occupied(run)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("")
    assert "not a run directory" in occupied(tmp_path / "other")
