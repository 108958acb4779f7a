"""Weights on disk for inference servers: one directory of safetensors buckets per pushed version.

The trainer writes its weights (plain Hugging Face parameter names, `Trainer.state_dict()`) into
`ROOT/v00000003/bucket-00001.safetensors`, `bucket-00002...`: each file a bucket of at most
`bucket_bytes` (a tensor larger than that is a bucket of its own), in the engine's dtype. Each server is
then told the directory and loads it bucket by bucket, tensor by tensor (vLLM through the worker
extension in `trialground.policy.backends.vllm.vllm_worker`, whose model's `load_weights` takes an
iterator; `trialground policy serve` copies each tensor into its model as it is read). Only a path crosses
the wire: nothing is pickled, so no server needs insecure deserialization enabled.

Contracts:
- `write_weights` streams: each tensor is cast (and copied to the host) on its own and written straight
  into its bucket's file, so the writer holds at most one tensor beyond the trainer's own weights, never a
  whole copy of the model. It is atomic: the directory appears complete (written under a temporary name,
  then renamed) or not at all, so a server never reads half a file. Tensors that share storage (tied
  embeddings: `lm_head.weight` is `model.embed_tokens.weight`) are written once, under their first name;
  loaders that tie them (transformers, vLLM) restore the other.
- `iter_weights` yields `(name, tensor)` from every `*.safetensors` file of a directory in name order (a
  sharded Hugging Face checkpoint directory works too), one tensor in memory at a time; `weight_headers`
  gives every tensor's dtype and shape without reading any data; both raise `PolicyError` naming the
  directory when it has no weights. `read_weights` is `iter_weights` gathered into a dict.
- `prune` keeps the newest `keep` version directories under a root and removes the others.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from trialground.errors import PolicyError

BUCKET_FILE = "bucket-{:05d}.safetensors"
DEFAULT_BUCKET_BYTES = 512 * 2**20
# The worker-extension method that vLLM's POST /collective_rpc calls (and `trialground policy serve`
# answers): its one argument is the directory to load.
RELOAD_METHOD = "trialground_load_weights"
_VERSION_DIR = re.compile(r"^v(\d{8})$")
# safetensors' names of torch dtypes (the format's header)
_SAFETENSORS_DTYPES = {
    "float32": "F32",
    "bfloat16": "BF16",
    "float16": "F16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def version_dir(root: Path, version: int) -> Path:
    return root / f"v{version:08d}"


def write_weights(
    state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]],
    root: Path,
    version: int,
    *,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    dtype: Any = None,
) -> Path:
    """Write the weights as buckets under `version_dir(root, version)`; returns that directory.
    `state_dict`: a mapping or `(name, tensor)` pairs (an iterator over gathered shards works); `dtype`:
    floating-point tensors are cast to it (the engine's), None keeps theirs."""
    if version < 0:
        raise PolicyError(f"write_weights: version must be >= 0, got {version}")
    if bucket_bytes < 1:
        raise PolicyError(f"write_weights: bucket_bytes must be >= 1, got {bucket_bytes}")
    items = state_dict.items() if isinstance(state_dict, Mapping) else state_dict
    root.mkdir(parents=True, exist_ok=True)
    final = version_dir(root, version)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for number, bucket in enumerate(buckets(items, bucket_bytes, dtype), start=1):
            _write_bucket(tmp / BUCKET_FILE.format(number), bucket, dtype, version)
        if final.exists():  # the same version pushed again (an evaluation re-loading a checkpoint)
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def buckets(items: Iterable[tuple[str, Any]], bucket_bytes: int, dtype: Any = None) -> Iterator[list[Any]]:
    """Consecutive `(name, tensor)` groups of at most `bucket_bytes` once cast to `dtype` (a larger tensor
    alone), tied copies left out. Nothing is copied: the tensors are the caller's."""
    import torch

    seen: set[tuple[int, int, tuple[int, ...], torch.dtype]] = set()
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, value in items:
        tensor = torch.as_tensor(value).detach()
        key = (
            tensor.untyped_storage().data_ptr(),
            int(tensor.storage_offset()),
            tuple(tensor.shape),
            tensor.dtype,
        )
        if key in seen:  # a tied copy: the loader re-ties it
            continue
        seen.add(key)
        nbytes = tensor.numel() * _cast_dtype(tensor, dtype).itemsize
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def _cast_dtype(tensor: Any, dtype: Any) -> Any:
    return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype


def _write_bucket(path: Path, bucket: list[tuple[str, Any]], dtype: Any, version: int) -> None:
    """One safetensors file (8-byte header length, JSON header, raw little-endian data), each tensor cast
    and moved to the host on its own as it is written."""
    import torch

    header: dict[str, Any] = {"__metadata__": {"format": "pt", "version": str(version)}}
    offset = 0
    for name, tensor in bucket:
        target = _cast_dtype(tensor, dtype)
        kind = _SAFETENSORS_DTYPES.get(str(target).removeprefix("torch."))
        if kind is None:
            raise PolicyError(
                f"write_weights: {name}: dtype {target} has no safetensors name", kind="weights"
            )
        nbytes = tensor.numel() * target.itemsize
        header[name] = {"dtype": kind, "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for _name, tensor in bucket:
            host = tensor.to(device="cpu", dtype=_cast_dtype(tensor, dtype)).contiguous()
            out.write(host.reshape(-1).view(torch.uint8).numpy().data)
            del host


def _weight_files(directory: str | Path) -> list[Path]:
    path = Path(directory)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        raise PolicyError(f"no *.safetensors weights in {str(path)!r}", kind="weights")
    return files


def iter_weights(directory: str | Path, device: str = "cpu") -> Iterator[tuple[str, Any]]:
    """`(name, tensor)` of every `*.safetensors` file in `directory`, one tensor read at a time."""
    from safetensors import safe_open

    for file in _weight_files(directory):
        try:
            with safe_open(str(file), framework="pt", device=device) as handle:
                for name in handle.keys():  # noqa: SIM118 - a safetensors handle, not a dict
                    yield name, handle.get_tensor(name)
        except PolicyError:
            raise
        except Exception as exc:  # safetensors raises its own error types besides OSError
            raise PolicyError(f"cannot read weights {str(file)!r}: {exc}", kind="weights") from exc


def weight_headers(directory: str | Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype, shape) of every tensor in `directory`, read from the headers only."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in _weight_files(directory):
        try:
            with open(file, "rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
            for name, info in header.items():
                if name != "__metadata__":
                    out[name] = (str(info["dtype"]), tuple(int(n) for n in info["shape"]))
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            raise PolicyError(f"cannot read weights {str(file)!r}: {exc}", kind="weights") from exc
    return out


def read_weights(directory: str | Path, device: str = "cpu") -> dict[str, Any]:
    """Every tensor of every `*.safetensors` file in `directory`, by name, on `device`."""
    return dict(iter_weights(directory, device))


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
