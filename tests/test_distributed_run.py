"""`torchrun --nproc_per_node 2 -m trialground train examples/quickstart.yaml` is one run on CPU (gloo):
rank 0 writes the run directory, the other rank only trains, and the run equals a one-process run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
TORCHRUN = Path(sys.executable).with_name("torchrun")
SMALL = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.batch_tasks=4",  # four groups: both ranks get some, and some steps have only one trainable group
    "loop.samples_per_task=4",
    "tasks.num_train=50",
    "tasks.num_eval=4",
    "policy.sampling.max_new_tokens=24",
    "policy.eval_sampling.max_new_tokens=24",
    # the two runs must grade alike: wall-clock deadlines get room on a busy machine (cpu_s still bounds)
    "sandbox.limits.wall_s=60",
    "reward.grading.test_timeout_s=60",
    "reward.grading.total_timeout_s=300",
]

pytestmark = pytest.mark.slow


def _train(launcher: list[str], out: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = [str(QUICKSTART), *(a for o in [*SMALL, f"output_dir={out}"] for a in ("--set", o))]
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [*launcher, "-m", "trialground", "train", *args],
        cwd=cwd, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def _metrics(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_torchrun_two_ranks_is_one_run_equal_to_one_process(tmp_path: Path) -> None:
    proc = _train(
        [str(TORCHRUN), "--standalone", "--nproc_per_node", "2"], tmp_path / "dist", tmp_path / "cwd"
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = tmp_path / "dist" / "quickstart"
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["quickstart"]
    assert list((tmp_path / "cwd").iterdir()) == []  # no rank wrote anywhere else
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2]  # one writer: each step once
    assert all(r["train/sequences"] == 16 for r in rows[1:])  # the whole batch, not one rank's share
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == ["step_1.parquet", "step_2.parquet"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2"]

    single = _train([sys.executable], tmp_path / "one", tmp_path / "cwd1")
    assert single.returncode == 0, single.stderr[-4000:]
    one = tmp_path / "one" / "quickstart"
    for got, want in zip(rows, _metrics(one), strict=True):
        for key in (
            "reward/mean",
            "train/tokens",
            "train/active_sequences",
            "train/grad_norm",
            "eval/pass@1",
        ):
            if key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), (got["step"], key)
    a = torch.load(run / "checkpoints" / "step_2" / "model.pt", weights_only=True)
    b = torch.load(one / "checkpoints" / "step_2" / "model.pt", weights_only=True)
    assert a.keys() == b.keys()
    # Equal up to float rounding, except where a gradient is a near-cancelling sum (an output-layer row of a
    # token nobody sampled): its sign and size then depend on the order of the all-reduce, and Adam turns any
    # gradient far above its eps into a step of ~lr. Those few elements may differ by at most that step per
    # update; anything systematic (a missed or extra optimiser step, a wrong normaliser) moves nearly all.
    lr, steps = 2e-4, 2
    off = total = 0
    for k in a:
        diff = (a[k] - b[k]).abs()
        assert float(diff.max()) <= 2 * lr * steps, (k, float(diff.max()))
        off += int((diff > 5e-5).sum())
        total += diff.numel()
    assert off <= total * 1e-3, f"{off} of {total} parameters differ by more than 5e-5"
