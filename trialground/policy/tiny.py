"""The bundled tiny model: where it lives, its tokenizer recipe and its architecture.

The weights in `trialground/policy/tiny_model/` are made by `scripts/pretrain_tiny.py`; this module holds
what that script and the policies share, so the recipe is written once:

- a byte-level BPE tokenizer fitted on project-generated text. Digits are split one by one (constants
  compose instead of being memorised as whole numbers); otherwise merges may span spaces and newlines, so
  an indented code line such as `\\n    x = x + ` is one or two tokens and solutions stay ~15-30 tokens.
- a chat template with role markers: `<|user|>\\n{content}<|end|>\\n ... <|assistant|>\\n`; the assistant
  ends its turn with `<|end|>`, the eos token.
- a small `LlamaForCausalLM` (tied embeddings, < 5M parameters).

Three models are bundled, each with its own fitted tokenizer: `tiny` (single-turn code,
`scripts/pretrain_tiny.py`), `tiny-agent` (multi-turn tool use on the `agent` task families,
`scripts/pretrain_agent.py --longctx-traces 0`) and `tiny-nav` (the same families plus the long-context ones:
`search`, paged `read_lines`, following a reference; `scripts/pretrain_agent.py`).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TINY_NAME = "tiny"
AGENT_NAME = "tiny-agent"
NAV_NAME = "tiny-nav"
FIX_NAME = "tiny-fix"  # tiny-nav continued on repository repairs through fixes/apply_fix (docs/swe.md)
# bundled model name -> its directory under trialground/policy/
BUNDLED = {TINY_NAME: "tiny_model", AGENT_NAME: "tiny_agent", NAV_NAME: "tiny_nav", FIX_NAME: "tiny_fix"}
EOS = "<|end|>"
PAD = "<|pad|>"
ROLES = ("system", "user", "assistant", "tool")
SPECIAL_TOKENS = (PAD, EOS, *(f"<|{role}|>" for role in ROLES))
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def tiny_model_dir(name: str = TINY_NAME) -> Path:
    """The directory of a bundled model (package data), whether or not its files exist yet."""
    return Path(str(importlib.resources.files("trialground.policy") / BUNDLED[name]))


def resolve_model_dir(model: str) -> Path:
    """A bundled name ('tiny', 'tiny-agent', 'tiny-nav', 'tiny-fix') -> its directory; a packaged model's
    name ('gemma-3-270m') or a local `.gguf` file -> its converted directory, made on first use
    (`policy/packaged.py`, `policy/gguf.py`); anything else must be a local HF model directory."""
    from trialground.policy.packaged import is_packaged, packaged_model_dir

    if is_packaged(model):
        return packaged_model_dir(model)
    if model.endswith(".gguf"):
        from trialground.policy.gguf import gguf_model_dir

        return gguf_model_dir(Path(model).expanduser())
    path = tiny_model_dir(model) if model in BUNDLED else Path(model).expanduser()
    if not (path / "config.json").is_file():
        script = {
            TINY_NAME: "pretrain_tiny.py",
            AGENT_NAME: "pretrain_agent.py --longctx-traces 0",
            NAV_NAME: "pretrain_agent.py",
            FIX_NAME: "pretrain_agent.py --swe-fixes (docs/swe.md)",
        }.get(model)
        hint = f" (run scripts/{script})" if script else ""
        raise FileNotFoundError(f"no Hugging Face model in {path}: config.json missing{hint}")
    return path


def build_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """Fit the byte-level BPE tokenizer on `texts`; a `PreTrainedTokenizerFast` with the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    # no regex split: merges may cross spaces and newlines; only digits are forced apart
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=PAD)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def tiny_llama_config(
    vocab_size: int, hidden: int = 128, layers: int = 4, heads: int = 4, max_positions: int = 256
) -> Any:
    """The architecture of the tiny model."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,  # filled from the tokenizer
        pad_token_id=None,
    )
