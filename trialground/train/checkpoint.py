"""Checkpoints that resume exactly: model, optimiser, RNG states, trainer version and the caller's state.

Layout of `runs/<name>/checkpoints/step_N/`:

    meta.json       step, version, time, file list (human-readable)
    model.pt        the trainer's module state dict (LoRA adapters included, as trained)
    optimizer.pt    AdamW state
    sharded/        FSDP runs, instead of model.pt and optimizer.pt: every rank's shards of both
                    (torch.distributed.checkpoint), saved and loaded by all ranks together
    master.pt       16-bit weights only: the fp32 masters AdamW steps (`trialground.train.precision`)
    rng.pt          python `random`, numpy global, torch CPU (+ CUDA) generator states, as plain data
    extra.pt        what the caller passes (task-pool state, loop counters, ...): plain data only
    hf/             the model in Hugging Face format, LoRA merged (+ tokenizer, generation config): loads
                    with `AutoModelForCausalLM.from_pretrained` and vLLM (`trialground.train.hf_checkpoint`)
    adapter/        LoRA runs: the adapters in peft format (`adapter_config.json` + safetensors)

Resuming = a fresh process builds the same `Trainer` from the same config, calls `load_checkpoint`, and
carries on: the RNG states are restored last, so the next random draw is the one the uninterrupted run
would have made. A checkpoint is written to `step_N.tmp` and renamed into place, so a run killed
mid-save never leaves a half-written `step_N`.

Nothing in a checkpoint runs on load: every `.pt` file holds only tensors, numbers, strings, lists,
tuples and dicts and is read with `torch.load(weights_only=True)`, whose unpickler builds those and
refuses every other object (a pickled callable, a class, a `__reduce__` payload); `meta.json` is JSON.
A file that is not such plain data is a `CheckpointError` naming it, raised before anything is restored.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trialground.train.hf_checkpoint import ADAPTER_DIR, HF_DIR, save_adapter, save_hf
from trialground.train.trainer import Trainer

SHARDED_DIR = "sharded"  # FSDP runs: torch.distributed.checkpoint shards instead of model.pt/optimizer.pt
_STEP_RE = re.compile(r"^step_(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded as plain data (or is missing); the message names it."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    path: Path
    step: int
    version: int
    extra: dict[str, Any] = field(default_factory=dict)


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step}"


def completed_checkpoints(run_dir: str | Path) -> list[Path]:
    """The complete checkpoints under `run_dir/checkpoints` (a `meta.json` inside), oldest step first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _STEP_RE.match(p.name)) and (p / "meta.json").is_file()
    ]
    return [p for _, p in sorted(found)]


def checkpoint_meta(path: str | Path) -> dict[str, Any] | None:
    """A checkpoint's `meta.json` (step, version, ...), or None when `path` holds no complete checkpoint."""
    meta_file = Path(path) / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        meta = json.loads(meta_file.read_text())
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{meta_file}: not a JSON object ({exc})") from exc
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_file}: not a JSON object")
    return meta


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under `run_dir/checkpoints`, or None."""
    done = completed_checkpoints(run_dir)
    return done[-1] if done else None


def rng_state() -> dict[str, Any]:
    """Every generator's state as plain data (numpy's key array as a list), loadable with weights_only."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(_tuples(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuples(value: Any) -> Any:
    """`random.setstate` needs tuples where a round trip may have given lists."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def load_plain(path: Path, **kwargs: Any) -> Any:
    """A `.pt` file of plain data (tensors, numbers, strings, containers); CheckpointError naming the file
    for anything else, without running it."""
    try:
        return torch.load(path, weights_only=True, **kwargs)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path}: missing from the checkpoint") from exc
    except Exception as exc:  # the safe unpickler's refusal, a truncated or foreign file: its message
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: not a plain-data checkpoint file (refused, nothing in it was run): {first}"
        ) from exc


def save_checkpoint(
    path: str | Path,
    trainer: Trainer,
    *,
    step: int,
    extra: Mapping[str, Any] | None = None,
    export_hf: bool = True,
    tokenizer: Any = None,
    base_model: str | Path | None = None,
) -> Path:
    """Write a complete checkpoint to `path` (e.g. `checkpoint_path(run_dir, step)`); returns `path`.

    With `export_hf` (the default) it holds `hf/` (with `tokenizer` saved into it when given) and, under
    LoRA, `adapter/`, whose config names `base_model` (the local directory the run started from)."""
    final = Path(path)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if trainer.parallel is not None and trainer.parallel.sharded:  # FSDP: every rank writes its shards
        trainer.parallel.checkpoint("save", str(tmp / SHARDED_DIR))
    else:
        torch.save(trainer.model.state_dict(), tmp / "model.pt")
        torch.save(trainer.optimizer.state_dict(), tmp / "optimizer.pt")
    if trainer.masters is not None:  # 16-bit weights: their fp32 masters are what the optimiser steps
        torch.save(trainer.masters.state(), tmp / "master.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    torch.save(dict(extra or {}), tmp / "extra.pt")
    if export_hf:
        save_hf(trainer, tmp / HF_DIR, tokenizer=tokenizer)
        if trainer.config.lora_rank > 0:
            save_adapter(trainer, tmp / ADAPTER_DIR, base_model=base_model)
    meta = {
        "step": step,
        "version": trainer.version,
        "time": time.time(),
        "lora_rank": trainer.config.lora_rank,
        "files": sorted(p.name for p in tmp.iterdir()),
    }
    _fsync_tree(tmp)  # the data is on disk before meta.json says it is complete
    # meta.json last: its presence marks the checkpoint complete.
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    _fsync_tree(tmp, only="meta.json")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _fsync_dir(final.parent)
    return final


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path, *, only: str | None = None) -> None:
    """Flush every file under `root` (or just `root/only`) and the directories holding them."""
    files = [root / only] if only else [p for p in root.rglob("*") if p.is_file()]
    for f in files:
        with open(f, "rb+") as handle:
            os.fsync(handle.fileno())
    for d in {f.parent for f in files} | {root}:
        _fsync_dir(d)


def load_checkpoint(path: str | Path, trainer: Trainer) -> LoadedCheckpoint:
    """Restore model, optimiser, version and RNG states into `trainer`; return step and extra state.

    `trainer` must be built from the same model architecture and `TrainerConfig` as the saved one.
    """
    root = Path(path)
    meta = checkpoint_meta(root)
    if meta is None:
        raise FileNotFoundError(f"{root}: not a complete checkpoint (no meta.json)")
    if meta.get("lora_rank", 0) != trainer.config.lora_rank:
        raise ValueError(
            f"{root}: saved with lora_rank={meta.get('lora_rank')}, trainer has {trainer.config.lora_rank}"
        )
    device = trainer.device
    sharded = trainer.parallel is not None and trainer.parallel.sharded
    if sharded != (root / SHARDED_DIR).is_dir():
        raise CheckpointError(
            f"{root}: saved {'with' if (root / SHARDED_DIR).is_dir() else 'without'} FSDP sharding; "
            "resume it with the same trainer.parallel"
        )
    # Every file is read (and so checked) before anything is restored.
    model = None if sharded else load_plain(root / "model.pt", map_location=device)
    optimizer = None if sharded else load_plain(root / "optimizer.pt", map_location=device)
    extra = load_plain(root / "extra.pt")
    rng = load_plain(root / "rng.pt")
    masters = None
    if trainer.masters is not None:  # 16-bit weights: missing master.pt means it was saved from fp32
        masters = load_plain(root / "master.pt", map_location=device)
        if not isinstance(masters, list):
            raise CheckpointError(f"{root / 'master.pt'}: holds {type(masters).__name__}, not a list")
    if not isinstance(extra, dict):
        raise CheckpointError(f"{root / 'extra.pt'}: holds {type(extra).__name__}, not a dict")
    if trainer.parallel is not None and sharded:
        trainer.parallel.checkpoint("load", str(root / SHARDED_DIR))
    elif model is not None and optimizer is not None:
        trainer.model.load_state_dict(model)
        trainer.optimizer.load_state_dict(optimizer)
    if trainer.masters is not None and masters is not None:
        trainer.masters.load(masters)
    trainer.version = int(meta["version"])
    set_rng_state(rng)
    return LoadedCheckpoint(path=root, step=int(meta["step"]), version=trainer.version, extra=extra)


def export_pretrained(trainer: Trainer, path: str | Path, *, tokenizer: Any = None) -> Path:
    """Merged full weights in Hugging Face format (for `from_pretrained`), plus the tokenizer if given."""
    return save_hf(trainer, path, tokenizer=tokenizer)
