"""GPU readiness checks that run without a GPU: the one-GPU example config validates, with the overrides
scripts/gpu_smoke.sh applies, and the smoke script refuses a machine it cannot run on, saying why."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trialground.orchestrator.run_config import load_config
from trialground.tasks.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpu_humaneval.yaml"
SMOKE = ROOT / "scripts" / "gpu_smoke.sh"


def _smoke_overrides() -> list[str]:
    """The `--set` values of the smoke script's train command, read from the script itself."""
    text = SMOKE.read_text()
    text = text[text.index("-m trialground train") : text.index("STATUS=$?")]  # the GPU run's own command
    sets = re.findall(r'--set "?([^"\n]+?)"?\s*\\?\n', text)
    values = {"$MODEL": "/models/Qwen2.5-0.5B-Instruct", "$STEPS": "3", "$EVAL_TASKS": "32"}
    values |= {"$RUNS": "runs", "$NAME": "gpu_smoke_test", "$BACKEND": "hf", "$SANDBOX": "bwrap"}
    out = []
    for item in sets:
        for var, value in values.items():
            item = item.replace(var, value)
        out.append(item)
    return out


def test_gpu_example_validates_with_the_smoke_overrides() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.policy.backend == "vllm" and cfg.policy.device == "cuda"
    assert cfg.loop.rollout_concurrency >= cfg.loop.batch_tasks * cfg.loop.samples_per_task
    assert [s.source for s in cfg.tasks.eval_sources] == ["humaneval"]
    overrides = _smoke_overrides()
    assert len(overrides) == 8, overrides
    smoke = load_config(EXAMPLE, overrides)
    assert smoke.loop.steps == 3 and smoke.policy.model == "/models/Qwen2.5-0.5B-Instruct"
    assert smoke.tasks.eval_sources[0].limit == 32
    assert smoke.policy.backend == "hf" and smoke.policy.device == "cuda"  # where vLLM is missing
    # the training source is a real one (HumanEval itself has no training split)
    assert load_source(cfg.tasks.sources[0].source, n=4)


def test_smoke_script_refuses_a_machine_without_a_gpu(tmp_path: Path) -> None:
    env = dict(os.environ)
    if shutil.which("nvidia-smi") is None:
        result = subprocess.run([str(SMOKE)], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 2 and "nvidia-smi not found" in result.stderr
    else:  # a GPU machine: a model directory that is not there is named
        env["MODEL"] = str(tmp_path / "absent")
        result = subprocess.run([str(SMOKE)], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 2 and f"no model in {tmp_path / 'absent'}" in result.stderr


@pytest.mark.slow
def test_the_smoke_script_runs_through_in_rehearsal(tmp_path: Path) -> None:
    """REHEARSE=1: every step of the script on the CPU with tiny shapes: the generation comparison for the
    three architectures, one GRPO step with its evaluations, and the summary read from the run's metrics."""
    env = dict(os.environ, REHEARSE="1", STEPS="1", EVAL_TASKS="2", RUNS=str(tmp_path / "runs"))
    # this interpreter, wherever its environment lives (the script's default is the checkout's .venv)
    env |= {"SMOKE_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    (tmp_path / "out").mkdir()
    result = subprocess.run([str(SMOKE)], capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for arch in ("llama", "qwen2", "qwen3"):
        assert re.search(rf"generation {arch}: lean +median", summary), summary
        assert f"generation {arch}: tokens lean vs loop: 0 of 16 rows differ" in summary, summary
        assert (tmp_path / "out" / f"generation-{arch}.json").exists()
    assert "steps finished:          1" in summary and "training tokens/s:" in summary, summary
    assert (tmp_path / "out" / "metrics.jsonl").exists()


def test_smoke_script_is_valid_bash_with_its_training_steps() -> None:
    assert subprocess.run(["bash", "-n", str(SMOKE)], capture_output=True).returncode == 0
    text = SMOKE.read_text()
    assert "benchmarks/train_step.py" in text and "--fsdp" in text and "--seq 16384" in text


@pytest.mark.slow
def test_the_smoke_scripts_training_steps_run_on_the_cpu(tmp_path: Path) -> None:
    """benchmarks/train_step.py as the smoke script runs it (step 2b), with the rehearsal's tiny shapes: an
    FSDP2 step over a one-process gloo group, and a long sequence with activation checkpointing."""
    out = tmp_path / "steps.jsonl"
    code = (
        "import sys; sys.argv[0] = 'train_step'\n"
        "from benchmarks.train_step import parser, run\n"
        "import json\n"
        "for extra in (['--fsdp', '--seq', '64', '--rows', '2'], ['--checkpointing', '--seq', '256']):\n"
        "    args = parser().parse_args(['--device', 'cpu', '--shape', 'tiny', '--steps', '1', *extra])\n"
        f"    open({str(out)!r}, 'a').write(json.dumps(run(args)) + '\\n')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    fsdp, long = [json.loads(line) for line in out.read_text().splitlines()]
    assert fsdp["fsdp"] and fsdp["rows"] == 2 and long["seq"] == 256 and not long["fsdp"]
    for step in (fsdp, long):
        assert step["tokens_per_s_per_gpu"] > 0 and step["peak_bytes"] > 0 and step["estimate_bytes"] > 0
        assert step["model_tflops"] > 0 and step["mfu"] is None  # no peak known for a CPU
    assert "tokens/s/GPU" in result.stdout and "MFU" in result.stdout
