"""A truncated Gemma 3 270M for the test suite: the real tokenizer and embeddings, two of its decoder
layers (a sliding-window one and a global one), made once per machine into the model cache from the
package's model (`policy.model: gemma-3-270m`, itself converted once).

Its sliding window is 32 tokens (the model's is 512), so short test sequences cross it. Building it
needs the `gemma` extra; `gemma_problem()` says why it cannot be built here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trialground.policy.model_cache import cached_dir
from trialground.policy.packaged import package_problem

MODEL = "gemma-3-270m"
LAYERS = (0, 5)  # a sliding-window layer, then a global one
WINDOW = 32


def gemma_problem() -> str | None:
    return package_problem(MODEL)


def truncated_gemma_dir() -> Path:
    """The cached two-layer Gemma directory (made on first use, ~10 s after the full conversion)."""
    from trialground.policy.packaged import packaged_model_dir

    full = packaged_model_dir(MODEL)
    return cached_dir(f"{full.name}-test-{len(LAYERS)}layers-w{WINDOW}", lambda out: _truncate(full, out))


def _truncate(full: Path, out: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    config = json.loads((full / "config.json").read_text())
    tensors = {}
    with safe_open(str(full / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            if not name.startswith("model.layers."):
                tensors[name] = f.get_tensor(name)
                continue
            index = int(name.split(".")[2])
            if index in LAYERS:
                new = LAYERS.index(index)
                tensors[name.replace(f"model.layers.{index}.", f"model.layers.{new}.", 1)] = f.get_tensor(
                    name
                )
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.update(
        num_hidden_layers=len(LAYERS),
        layer_types=[config["layer_types"][i] for i in LAYERS],
        sliding_window=WINDOW,
    )
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "GEMMA_TERMS.html"):
        if (full / name).is_file():
            shutil.copyfile(full / name, out / name)
