"""Tiny randomly initialised checkpoints of several architectures, made with `save_pretrained`, each with
the bundled tokenizer (and its chat template) so the whole loop can run on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

from trialground.policy.tiny import tiny_model_dir

HIDDEN, LAYERS, HEADS = 32, 2, 4
_LLAMA_LIKE = dict(
    hidden_size=HIDDEN,
    intermediate_size=64,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
# name -> (config class, keyword arguments)
ARCHS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", _LLAMA_LIKE),
    "qwen2": ("Qwen2Config", _LLAMA_LIKE),
    "qwen3": ("Qwen3Config", _LLAMA_LIKE | {"head_dim": 16}),
    "mistral": ("MistralConfig", _LLAMA_LIKE),
    "gemma": ("GemmaConfig", _LLAMA_LIKE | {"head_dim": 8}),
    "phi": ("PhiConfig", _LLAMA_LIKE | {"num_key_value_heads": HEADS}),
    "gpt2": ("GPT2Config", dict(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=512)),
    "gpt_neox": (
        "GPTNeoXConfig",
        dict(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=HEADS),
    ),
}

_MOE = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=512,
)  # fmt: skip
# mixture-of-experts architectures: name -> (config class, keyword arguments)
MOE_ARCHS: dict[str, tuple[str, dict[str, Any]]] = {
    "mixtral": ("MixtralConfig", _MOE | {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        _MOE | {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "head_dim": 8},
    ),
}


def bundled_tokenizer() -> Any:
    return transformers.AutoTokenizer.from_pretrained(tiny_model_dir())


def make_checkpoint(arch: str, path: Path, *, seed: int = 0, stop_often: bool = False) -> Path:
    """A random `arch` model saved to `path` with the bundled tokenizer.

    `stop_often`: the generation config lists a quarter of the vocabulary as eos tokens, so a random
    model's replies end at varied lengths (an overlong penalty then gives different rewards in a group,
    hence a gradient, even though a random model never solves a task)."""
    tok = bundled_tokenizer()
    config_cls, kwargs = ARCHS[arch]
    config = getattr(transformers, config_cls)(
        # room beyond the tokenizer, as real models pad their vocabulary (and a model-specific tokenizer
        # class that AutoTokenizer picks from config.json may add a default special token)
        vocab_size=len(tok) + 16,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        **kwargs,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if stop_often:
        model.generation_config.eos_token_id = [tok.eos_token_id, *range(10, len(tok), 4)]
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
