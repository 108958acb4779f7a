"""GPU readiness checks that run without a GPU: the one-GPU example config validates, with the overrides
scripts/gpu_smoke.sh applies, and the smoke script refuses a machine it cannot run on, saying why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from trialground.orchestrator.run_config import load_config
from trialground.tasks.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpu_humaneval.yaml"
SMOKE = ROOT / "scripts" / "gpu_smoke.sh"


def _smoke_overrides() -> list[str]:
    """The `--set` values of the smoke script's train command, read from the script itself."""
    text = SMOKE.read_text()
    sets = re.findall(r'--set "?([^"\n]+?)"?\s*\\?\n', text)
    values = {"$MODEL": "/models/Qwen2.5-0.5B-Instruct", "$STEPS": "3", "$EVAL_TASKS": "32"}
    values |= {"$OUT": "runs", "$NAME": "gpu_smoke_test"}
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
    assert len(overrides) == 6, overrides
    smoke = load_config(EXAMPLE, overrides)
    assert smoke.loop.steps == 3 and smoke.policy.model == "/models/Qwen2.5-0.5B-Instruct"
    assert smoke.tasks.eval_sources[0].limit == 32
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
