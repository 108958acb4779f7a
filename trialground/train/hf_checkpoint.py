"""The Hugging Face side of a checkpoint: a directory other tools load as they are, and reading it back.

Inside every `checkpoints/step_N/` (beside what resume needs, see `trialground.train.checkpoint`):

    hf/        the full model as trained (LoRA merged in): `config.json`, `generation_config.json`,
               `model.safetensors`, the tokenizer (with its chat template). Loads with
               `AutoModelForCausalLM.from_pretrained(".../hf")` and vLLM's `LLM(model=".../hf")`.
    adapter/   LoRA runs only: the adapters in peft format (`adapter_config.json`,
               `adapter_model.safetensors`), loadable with `PeftModel.from_pretrained(base, ".../adapter")`
               on the base model named in `adapter_config.json`.

`checkpoint_weights` turns a checkpoint into the plain full-model state dict that `Policy.load_weights`
takes, from the adapter when there is one (applied to the run's base model), else from `hf/`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from trialground.errors import PolicyError
from trialground.train.trainer import Trainer

HF_DIR = "hf"
ADAPTER_DIR = "adapter"


def save_hf(trainer: Trainer, path: str | Path, *, tokenizer: Any = None) -> Path:
    """The trained model in Hugging Face format (safetensors), LoRA merged, plus the tokenizer if given."""
    out = Path(path)
    base: Any = trainer.base_model
    weights = trainer.state_dict()
    # A module holding injected LoRA layers has other parameter names; save_pretrained takes the plain
    # names from `weights` and the architecture from `base.config`.
    base.save_pretrained(out, state_dict=weights, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def save_adapter(trainer: Trainer, path: str | Path, *, base_model: str | Path | None = None) -> Path:
    """The LoRA adapters in peft format; `base_model` (a local directory) is recorded as the model they
    apply to."""
    out = Path(path)
    peft_model: Any = trainer.model
    if base_model is not None:
        peft_model.peft_config["default"].base_model_name_or_path = str(base_model)
    peft_model.save_pretrained(out, safe_serialization=True)
    return out


def _read_adapter_base(adapter: Path) -> str | None:
    try:
        return json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{adapter}: unreadable adapter_config.json: {exc}") from exc


def merged_adapter_weights(adapter: str | Path, base: str | Path | None = None) -> dict[str, torch.Tensor]:
    """Full-model weights: the peft adapter in `adapter` applied to `base` (default: the base model its
    `adapter_config.json` names) and merged in."""
    from peft import PeftModel

    from trialground.policy.loading import load_pretrained

    adapter = Path(adapter)
    base = base if base is not None else _read_adapter_base(adapter)
    if not base:
        raise PolicyError(f"{adapter}: adapter_config.json names no base model")
    model: Any = load_pretrained(base)
    try:
        merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise PolicyError(f"{adapter}: cannot apply the adapter to {base}: {exc}") from exc
    return {k: v.detach() for k, v in merged.state_dict().items()}


def checkpoint_weights(checkpoint: str | Path, base: str | Path | None = None) -> dict[str, torch.Tensor]:
    """The full-model state dict of a `checkpoints/step_N` directory, for `Policy.load_weights`: from its
    peft adapter (applied to `base`, default the base model it names) when it has one, else from `hf/`.
    PolicyError when it has neither."""
    root = Path(checkpoint)
    if (root / ADAPTER_DIR / "adapter_config.json").is_file():
        return merged_adapter_weights(root / ADAPTER_DIR, base)
    if (root / HF_DIR / "config.json").is_file():
        from trialground.policy.loading import load_pretrained

        return {k: v.detach() for k, v in load_pretrained(root / HF_DIR).state_dict().items()}
    raise PolicyError(
        f"{root}: no {HF_DIR}/ or {ADAPTER_DIR}/ directory (expected runs/<name>/checkpoints/step_N)"
    )
