"""Recipe test: the production training loop (`trialground.orchestrator.loop.run`, what `trialground
train` runs) for a few GRPO steps of the bundled tiny model on the codegen family, graded in real bubblewrap
sandboxes and scored by the rubric, with fixed seeds; per-step rewards and losses must equal the stored
values in recipe_expected.json.

Regenerate the stored values (after an intended change, e.g. a retrained tiny model) with
    .venv/bin/python tests/train/test_recipe.py --write
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs the [train] extra")

import pyarrow.parquet as pq
import torch

from trialground.orchestrator.loop import run
from trialground.orchestrator.run_config import load_config
from trialground.policy.tiny import tiny_model_dir

EXPECTED = Path(__file__).with_name("recipe_expected.json")
QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.yaml"
STEPS, TASKS, K = 3, 4, 4


def model_fingerprint() -> str:
    weights = tiny_model_dir() / "model.safetensors"
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:16] if weights.is_file() else "missing"


def run_recipe(root: Path) -> dict[str, Any]:
    """The quickstart, shortened: one generation batch per step, so the run is exactly repeatable."""
    config = load_config(
        QUICKSTART,
        [
            f"output_dir={root}", "name=recipe", f"loop.steps={STEPS}", f"loop.batch_tasks={TASKS}",
            f"loop.samples_per_task={K}", "loop.eval_interval=0", f"loop.rollout_concurrency={TASKS}",
            "tasks.num_train=64", "tasks.num_eval=4", "reward.canaries=0",
        ],
    )  # fmt: skip
    asyncio.run(run(config))
    run_dir = root / "recipe"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    by_step = {m["step"]: m for m in metrics if "train/loss" in m}
    out: dict[str, Any] = {"steps": []}
    for step in range(1, STEPS + 1):
        rows = pq.read_table(run_dir / "trajectories" / f"step_{step}.parquet").to_pylist()
        m = by_step[step]
        out["steps"].append(
            {
                "rewards": [r["reward"] for r in rows],
                "completion_tokens": [r["completion_tokens"] for r in rows],
                "loss": m.get("train/loss", 0.0),
                "grad_norm": m.get("train/grad_norm", 0.0),
                "clip_frac": m.get("train/clip_frac", 0.0),
                "gradings": m["verify/gradings"],
                "pass_rate": m["verify/pass_rate"],
                "outcome_mean": m["reward/outcome_mean"],
            }
        )
    return out


def _run_single_threaded() -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bit-stable float reductions, whatever the machine
    try:
        with tempfile.TemporaryDirectory() as root:
            return run_recipe(Path(root))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_recipe_matches_stored_values() -> None:
    if model_fingerprint() == "missing":
        pytest.skip("the bundled tiny model is not built (scripts/pretrain_tiny.py)")
    stored = json.loads(EXPECTED.read_text())
    assert stored["model"] == model_fingerprint(), (
        "the bundled tiny model changed since the stored values were made; if intended, regenerate: "
        ".venv/bin/python tests/train/test_recipe.py --write"
    )
    got = _run_single_threaded()
    for i, (g, s) in enumerate(zip(got["steps"], stored["steps"], strict=True)):
        assert g["rewards"] == s["rewards"], f"step {i}"
        assert g["completion_tokens"] == s["completion_tokens"], f"step {i}"
        for key in ("loss", "grad_norm", "clip_frac"):
            assert g[key] == pytest.approx(s[key], rel=1e-4, abs=1e-6), f"step {i} {key}"
        # one source per metric: every trajectory of the step was graded once, and the grader's pass rate
        # is the rubric's outcome mean
        assert g["gradings"] == TASKS * K and g["pass_rate"] == pytest.approx(g["outcome_mean"])
    # the run learned something to check: not every reward is the same
    assert len({r for s in stored["steps"] for r in s["rewards"]}) > 1


if __name__ == "__main__" and "--write" in sys.argv:
    result = _run_single_threaded()
    EXPECTED.write_text(json.dumps({"model": model_fingerprint(), **result}, indent=1) + "\n")
    print(f"wrote {EXPECTED}")
