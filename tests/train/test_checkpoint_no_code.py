"""Nothing in a run directory runs on load: every checkpoint file is plain data, a pickle payload in any
file the loader reads is refused (the error names the file), and run names stay one directory name."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from train_helpers import PAD, tiny_llama

from trialground.errors import ConfigError
from trialground.orchestrator.run_config import dump_config, load_config
from trialground.train.checkpoint import (
    CheckpointError,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
LOADED_FILES = ("model.pt", "optimizer.pt", "extra.pt", "rng.pt")


class Payload:
    """Unpickling this makes a directory: the proof that code ran on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


def _plant(path: Path, marker: Path) -> None:
    torch.save({"state": Payload(marker)}, path)


def _checkpoint(tmp_path: Path) -> Path:
    trainer = Trainer(tiny_llama(), TrainerConfig(), PAD)
    extra = {"step": 3, "task_pool": {"rng": np.random.default_rng(1).bit_generator.state}}
    return save_checkpoint(checkpoint_path(tmp_path, 3), trainer, step=3, extra=extra, export_hf=False)


@pytest.mark.parametrize("name", LOADED_FILES)
def test_a_pickle_payload_in_any_checkpoint_file_never_runs(tmp_path: Path, name: str) -> None:
    path = _checkpoint(tmp_path)
    marker = tmp_path / f"ran-{name}"
    _plant(path / name, marker)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        load_checkpoint(path, Trainer(tiny_llama(seed=1), TrainerConfig(), PAD))
    assert not marker.exists(), f"unpickling {name} ran code"


def test_rng_and_extra_round_trip_as_plain_data(tmp_path: Path) -> None:
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    path = _checkpoint(tmp_path)
    expected = (random.random(), np.random.random(), torch.rand(1).item())
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    loaded = load_checkpoint(path, Trainer(tiny_llama(seed=1), TrainerConfig(), PAD))
    assert (random.random(), np.random.random(), torch.rand(1).item()) == expected
    assert loaded.extra["task_pool"]["rng"] == np.random.default_rng(1).bit_generator.state


def test_a_broken_meta_json_names_the_file(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    (path / "meta.json").write_text("[" * 100_000)
    with pytest.raises(CheckpointError, match=r"meta\.json"):
        load_checkpoint(path, Trainer(tiny_llama(seed=1), TrainerConfig(), PAD))


@pytest.mark.parametrize("name", ["../x", "/abs/run", "a/b", "..", ".", ".hidden", "a\\b", ""])
def test_a_run_name_is_one_directory_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="name"):
        load_config(QUICKSTART, [f"name={name}", f"output_dir={tmp_path}"])


def test_train_and_config_show_refuse_a_name_outside_output_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sets = ["--set", "name=../x", "--set", f"output_dir={out}"]
    for command in ("train", "config show"):
        proc = subprocess.run(
            [sys.executable, "-m", "trialground", *command.split(), str(QUICKSTART), *sets],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert proc.returncode == 2, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "not a run name" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created, inside or beside


@pytest.mark.timeout(300)
def test_resume_of_a_run_with_payloads_everywhere_runs_none(tmp_path: Path) -> None:
    """`train --resume` of a run directory whose every checkpoint file is a pickle payload: rc 2, the
    error names the file, and no payload ran."""
    overrides = ["name=planted", f"output_dir={tmp_path}", "loop.steps=2", "tasks.num_train=20"]
    overrides += ["tasks.num_eval=4", "loop.eval_interval=0"]
    config = load_config(QUICKSTART, overrides)
    run = tmp_path / "planted"
    step = run / "checkpoints" / "step_1"
    step.mkdir(parents=True)
    (run / "trajectories").mkdir()
    (run / "config.yaml").write_text(dump_config(config))
    markers = {name: tmp_path / f"ran-{name}" for name in LOADED_FILES}
    for name, marker in markers.items():
        _plant(step / name, marker)
    (step / "meta.json").write_text(json.dumps({"step": 1, "version": 1, "lora_rank": 0, "files": []}))
    proc = subprocess.run(
        [sys.executable, "-m", "trialground", "train", "--resume", str(run)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "model.pt" in proc.stderr and "nothing in it was run" in proc.stderr
    assert not any(m.exists() for m in markers.values())
