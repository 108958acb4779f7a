"""Loading a policy's model and tokenizer from a local Hugging Face directory, any causal-LM architecture.

The model class comes from the checkpoint's `config.json` through `AutoModelForCausalLM`, so a Qwen2,
Gemma or GPT-2 checkpoint is built as that architecture, never as a look-alike. Loading is strict: a
weight the checkpoint has but the architecture does not (unexpected), a weight the architecture needs but
the checkpoint lacks (missing: it would stay randomly initialised), or a shape that differs is a
`PolicyError` naming the weights, not a warning. Remote code is never run: every load passes
`trust_remote_code=False`, so a directory whose `config.json` or `tokenizer_config.json` names its own code
(`auto_map`) is refused without a prompt. An unreadable or truncated weight file, and any other load
failure are `PolicyError`s. A tokenizer without a chat template gets the one `policy.chat_template`
names (`policy/templates.py`: `plain` for base models by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from trialground.errors import PolicyError
from trialground.policy.config import PolicyConfig
from trialground.policy.templates import with_template
from trialground.policy.tiny import resolve_model_dir

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def model_dir(config: PolicyConfig) -> Path:
    """The local directory of `config.model` (a bundled name or a path); PolicyError when it is not one."""
    try:
        return resolve_model_dir(config.model)
    except (OSError, ImportError, ValueError) as exc:  # not found, or a GGUF file that cannot be converted
        raise PolicyError(f"cannot load model {config.model!r}: {exc}") from exc


def load_tokenizer(config: PolicyConfig) -> Any:
    """The model's tokenizer, with a pad token (eos when the model has none) and the chat template
    `policy.chat_template` chooses (`policy/templates.py`)."""
    path = model_dir(config)
    try:
        tokenizer: Any = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as exc:  # a broken or hostile directory: its error, never a traceback
        raise PolicyError(f"cannot load the tokenizer of model {config.model!r}: {exc}") from exc
    try:
        with_template(tokenizer, config.chat_template)
    except (OSError, ValueError) as exc:
        raise PolicyError(f"model {config.model!r}: {exc}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _problems(info: dict[str, Any]) -> list[str]:
    out = []
    for key, what in (
        ("missing_keys", "missing from the checkpoint"),
        ("unexpected_keys", "in the checkpoint but not in the architecture"),
        ("mismatched_keys", "of a different shape"),
    ):
        names = sorted(str(n) for n in info.get(key) or ())
        if names:
            more = f" (+{len(names) - 5} more)" if len(names) > 5 else ""
            plural = "s" if len(names) != 1 else ""
            out.append(f"{len(names)} weight{plural} {what}: {', '.join(names[:5])}{more}")
    out.extend(str(e) for e in info.get("error_msgs") or ())
    return out


def load_pretrained(path: str | Path, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """`AutoModelForCausalLM.from_pretrained(path)`, strictly: every weight present, none left over."""
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, output_loading_info=True, trust_remote_code=False
        )
    except Exception as exc:  # truncated safetensors, remote code, bad config: an error, not a traceback
        raise PolicyError(f"cannot load a causal LM from {path}: {type(exc).__name__}: {exc}") from exc
    model, info = loaded
    problems = _problems(info)
    if problems:
        raise PolicyError(f"{path}: the checkpoint does not match its architecture: " + "; ".join(problems))
    return model  # type: ignore[no-any-return]


def load_model(config: PolicyConfig) -> PreTrainedModel:
    """The causal LM of `config.model` on `config.device`; on CPU, sets torch's threads process-wide."""
    model: Any = load_pretrained(model_dir(config), DTYPES[config.dtype])
    device = torch.device(config.device)
    if device.type == "cpu" and config.cpu_threads is not None:
        # process-wide: with more threads than idle cores, every op waits on its slowest thread
        torch.set_num_threads(config.cpu_threads)
    return model.to(device)  # type: ignore[no-any-return]


def check_vocabulary(config: PolicyConfig, model: Any, tokenizer: Any) -> None:
    """PolicyError when the tokenizer has ids the model cannot embed (they do not belong together)."""
    embeddings = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embeddings:
        raise PolicyError(
            f"model {config.model!r}: its tokenizer has {len(tokenizer)} tokens but the model embeds only "
            f"{embeddings}; they do not belong together"
        )


def base_model_dir(config: PolicyConfig) -> str | None:
    """The absolute local directory of the run's starting model (recorded in LoRA adapters), or None when
    `config.model` is not a local model directory."""
    try:
        return str(resolve_model_dir(config.model).resolve())
    except FileNotFoundError:
        return None
