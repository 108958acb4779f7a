"""A GGUF file as a Hugging Face model directory, converted once and cached (`policy/model_cache.py`).

`policy.model` may be a local `.gguf` file (llama.cpp's format, as quantised checkpoints are shared) or a
name a package ships one under (`policy/packaged.py`). The file is converted once into a directory that
every backend and tool reads: `config.json`, `generation_config.json`, `model.safetensors` in float32 (the
quantised blocks de-quantised exactly: bfloat16 would round them a second time) and the tokenizer
(`tokenizer.json`), plus `trialground-source.json` saying what it was made from. Later loads read that
directory and take seconds.

transformers reads the architecture, the weights (de-quantised) and the tokenizer from the file; it
refuses to save a model it loaded from GGUF, so the weights are copied into a model built from the same
configuration, which saves like any other. The tokenizer is built from the file's vocabulary
(`policy/gguf_tokenizer.py`), which takes seconds where transformers' converter re-reads every field
of the file through the `gguf` package.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from trialground.policy.model_cache import cached_dir, file_sha256

# The packages converting a GGUF file needs, and the extra that installs them.
GGUF_EXTRA = "gguf"
SOURCE_FILE = "trialground-source.json"


def missing_modules() -> list[str]:
    """The modules conversion imports that are not installed."""
    import importlib.util

    return [m for m in ("gguf", "torch", "transformers") if importlib.util.find_spec(m) is None]


def gguf_model_dir(path: Path, *, key: str | None = None, sha256: str | None = None) -> Path:
    """The cached Hugging Face directory of the GGUF file `path`, converted on first use.

    `key` names the cache entry (default: the file's stem and the first 16 hex digits of its SHA-256);
    `sha256`, when the caller knows the file's digest, saves hashing it again."""
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    if key is None:
        digest = sha256 or file_sha256(path)
        key = f"{path.stem}-{digest[:16]}"
    return cached_dir(key, lambda out: convert(path, out, sha256=sha256))


def convert(path: Path, out: Path, *, sha256: str | None = None) -> None:
    """Write the Hugging Face directory of the GGUF file `path` into the empty directory `out`."""
    missing = missing_modules()
    if missing:
        raise ModuleNotFoundError(
            f"converting {path.name} needs {', '.join(missing)}: pip install 'trialground[{GGUF_EXTRA}]'"
        )
    import torch
    from transformers import AutoModelForCausalLM

    from trialground.policy.gguf_tokenizer import gguf_tokenizer

    started = time.perf_counter()
    loaded: Any = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, trust_remote_code=False
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the saved weights are plain float32
    with torch.device("meta"):
        model: Any = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded
    model.save_pretrained(out, safe_serialization=True)
    weights_s = time.perf_counter() - started
    tokenizer = gguf_tokenizer(path)
    tokenizer.save_pretrained(out)
    (out / SOURCE_FILE).write_text(
        json.dumps(
            {
                "gguf": path.name,
                "sha256": sha256 or file_sha256(path),
                "weights_dtype": "float32",
                "convert_weights_s": round(weights_s, 1),
                "convert_total_s": round(time.perf_counter() - started, 1),
            },
            indent=2,
        )
        + "\n"
    )


def copy_notices(files: list[Path], out: Path) -> None:
    """Copy license and notice files beside a converted model."""
    for f in files:
        if f.is_file():
            shutil.copyfile(f, out / f.name)
