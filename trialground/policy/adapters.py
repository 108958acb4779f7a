"""LoRA adapters as inference servers load them: PEFT's directory format, `adapter_model.safetensors` (the
`lora_A` / `lora_B` tensors under PEFT's names, `base_model.model.<module>.lora_A.weight`) beside
`adapter_config.json` (`r`, `lora_alpha`, `target_modules`, ...). vLLM (`/v1/load_lora_adapter`, or a
`LoRARequest` in process), SGLang (`/load_lora_adapter`) and `trialground policy serve` read it.

A LoRA run pushes only this: rank x (in + out) numbers per adapted matrix instead of the whole model
(`docs/benchmarks.md` has the bytes). `Adapter.deltas()` gives each adapted weight's change,
`scale x B @ A` with scale `lora_alpha / r` (`lora_alpha / sqrt(r)` with rsLoRA), which a server that
merges adapters into its weights adds to the base weight. What PEFT can express beyond plain LoRA on
linear layers (DoRA, per-module ranks or alphas, biases, modules trained whole) is refused by name.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trialground import plainjson
from trialground.errors import PolicyError

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
MAX_CONFIG_BYTES = 1 << 20
PREFIX = "base_model.model."
_UNSUPPORTED = ("use_dora", "rank_pattern", "alpha_pattern", "modules_to_save")


@dataclass(frozen=True)
class Adapter:
    """One LoRA adapter: `tensors` under PEFT's saved names, `config` PEFT's adapter config as a dict."""

    tensors: Mapping[str, torch.Tensor]
    config: Mapping[str, Any]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    @property
    def scale(self) -> float:
        r, alpha = int(self.config["r"]), float(self.config["lora_alpha"])
        return alpha / math.sqrt(r) if self.config.get("use_rslora") else alpha / r

    def check(self) -> None:
        """Raise PolicyError naming what this module cannot serve."""
        for key in ("r", "lora_alpha"):
            if not isinstance(self.config.get(key), int | float) or isinstance(self.config.get(key), bool):
                raise PolicyError(f"{ADAPTER_CONFIG}: {key} must be a number", kind="weights")
        for key in _UNSUPPORTED:
            if self.config.get(key):
                raise PolicyError(
                    f"{ADAPTER_CONFIG}: {key} is not supported (plain LoRA only)", kind="weights"
                )
        if self.config.get("bias", "none") != "none":
            raise PolicyError(f"{ADAPTER_CONFIG}: bias {self.config['bias']!r}: only 'none'", kind="weights")
        for name in self.tensors:
            if not name.startswith(PREFIX) or not name.endswith((".lora_A.weight", ".lora_B.weight")):
                raise PolicyError(f"{ADAPTER_WEIGHTS}: {name!r} is not a LoRA A or B matrix", kind="weights")

    def deltas(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(the adapted weight's plain name, scale x B @ A) for each adapted module, in float32."""
        self.check()
        modules = sorted({n.removeprefix(PREFIX).rsplit(".lora_", 1)[0] for n in self.tensors})
        for module in modules:
            a = self.tensors.get(f"{PREFIX}{module}.lora_A.weight")
            b = self.tensors.get(f"{PREFIX}{module}.lora_B.weight")
            if a is None or b is None:
                raise PolicyError(f"{ADAPTER_WEIGHTS}: {module} lacks its lora_A or lora_B", kind="weights")
            if a.dim() != 2 or b.dim() != 2 or b.shape[1] != a.shape[0]:
                raise PolicyError(
                    f"{ADAPTER_WEIGHTS}: {module}: A {tuple(a.shape)} and B {tuple(b.shape)} do not chain",
                    kind="weights",
                )
            yield f"{module}.weight", self.scale * (b.float() @ a.float())  # [out, in]


def _plain(value: Any) -> Any:
    """`value` with sets as sorted lists (PEFT keeps target_modules as a set), for JSON."""
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_adapter(adapter: Adapter, directory: Path) -> int:
    """Write `adapter` in PEFT's format into `directory` (made; an existing one is refused); the bytes
    written."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in adapter.tensors.items()}
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    (directory / ADAPTER_CONFIG).write_text(json.dumps(_plain(dict(adapter.config)), indent=1))
    return sum(os.path.getsize(directory / f) for f in (ADAPTER_WEIGHTS, ADAPTER_CONFIG))


def read_adapter(directory: str | Path) -> Adapter:
    """The adapter in `directory` (PEFT's format), checked; PolicyError saying what is wrong."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    root = Path(directory)
    try:
        with open(root / ADAPTER_CONFIG, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise PolicyError(f"{ADAPTER_CONFIG}: over {MAX_CONFIG_BYTES} bytes", kind="weights")
        config = plainjson.loads(raw, plainjson.REQUEST_BODY)
        tensors = load_file(str(root / ADAPTER_WEIGHTS))
    except OSError as exc:
        raise PolicyError(f"{root}: {exc.strerror or exc}", kind="weights") from exc
    except plainjson.UnparsableJSON as exc:
        raise PolicyError(f"{ADAPTER_CONFIG}: {exc}", kind="weights") from exc
    except SafetensorError as exc:
        raise PolicyError(f"{ADAPTER_WEIGHTS}: {exc}", kind="weights") from exc
    if not isinstance(config, dict):
        raise PolicyError(f"{ADAPTER_CONFIG}: expected a JSON object", kind="weights")
    adapter = Adapter(tensors, config)
    adapter.check()
    return adapter
