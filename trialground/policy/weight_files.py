"""Weights on disk for inference servers: one directory of safetensors per pushed version.

The trainer writes its weights (plain Hugging Face parameter names, `Trainer.state_dict()`) into
`ROOT/v00000003/model.safetensors`; each server is then told the directory and loads it (vLLM through the
worker extension in `trialground.policy.vllm_worker`, `trialground policy serve` directly). Only a path
crosses the wire: nothing is pickled, so no server needs insecure deserialization enabled.

Contracts:
- `write_weights` is atomic: the directory appears complete (written under a temporary name, then
  renamed) or not at all, so a server never reads half a file. Tensors that share storage (tied
  embeddings: `lm_head.weight` is `model.embed_tokens.weight`) are written once, under their first name;
  loaders that tie them (transformers, vLLM) restore the other.
- `read_weights` reads every `*.safetensors` file of a directory (a sharded Hugging Face checkpoint
  directory works too) and raises `PolicyError` naming the directory when there is none.
- `prune` keeps the newest `keep` version directories under a root and removes the others.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trialground.errors import PolicyError

WEIGHTS_FILE = "model.safetensors"
# The worker-extension method that vLLM's POST /collective_rpc calls (and `trialground policy serve`
# answers): its one argument is the directory to load.
RELOAD_METHOD = "trialground_load_weights"
_VERSION_DIR = re.compile(r"^v(\d{8})$")


def version_dir(root: Path, version: int) -> Path:
    return root / f"v{version:08d}"


def write_weights(state_dict: Mapping[str, Any], root: Path, version: int) -> Path:
    """Write `state_dict` as `version_dir(root, version)/model.safetensors`; returns that directory."""
    import torch
    from safetensors.torch import save_file

    if version < 0:
        raise PolicyError(f"write_weights: version must be >= 0, got {version}")
    tensors: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int, tuple[int, ...], torch.dtype]] = set()
    for name, value in state_dict.items():
        tensor = torch.as_tensor(value).detach()
        storage = tensor.untyped_storage().data_ptr()
        key = (storage, int(tensor.storage_offset()), tuple(tensor.shape), tensor.dtype)
        if key in seen:  # a tied copy: the loader re-ties it
            continue
        seen.add(key)
        # a copy, so the file holds this step's values even if the trainer steps on meanwhile
        tensors[name] = tensor.to("cpu", copy=True).contiguous()
    root.mkdir(parents=True, exist_ok=True)
    final = version_dir(root, version)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt", "version": str(version)})
        if final.exists():  # the same version pushed again (an evaluation re-loading a checkpoint)
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read_weights(directory: str | Path, device: str = "cpu") -> dict[str, Any]:
    """Every tensor of every `*.safetensors` file in `directory`, by name, on `device`."""
    from safetensors.torch import load_file

    path = Path(directory)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        raise PolicyError(f"no *.safetensors weights in {str(path)!r}", kind="weights")
    out: dict[str, Any] = {}
    for file in files:
        try:
            out.update(load_file(str(file), device=device))
        except Exception as exc:  # safetensors raises its own error types besides OSError
            raise PolicyError(f"cannot read weights {str(file)!r}: {exc}", kind="weights") from exc
    return out


def prune(root: Path, keep: int = 2) -> None:
    """Remove all but the newest `keep` version directories under `root`."""
    versions = sorted(p for p in root.iterdir() if p.is_dir() and _VERSION_DIR.match(p.name))
    for old in versions[: max(0, len(versions) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def tensor_digest(tensor: Any) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes: equal digests mean equal weights, bit for bit."""
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    digest = hashlib.sha256(f"{flat.dtype}:{tuple(tensor.shape)}:".encode())
    digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
