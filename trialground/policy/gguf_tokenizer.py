"""The tokenizer of a GGUF file, built from the file's vocabulary in seconds.

transformers converts a GGUF tokenizer by parsing every metadata field of the file through the `gguf`
package (262,144 tokens, scores and types: ~15 s of Python on a 2-core machine before anything is
built) and then deriving the BPE merges. Here the metadata is read by a small reader of its own (the
format is a header and a list of typed key-value pairs, `read_metadata`), and the `tokenizers` model is
built from it directly.

Covered: SentencePiece-style BPE vocabularies of the Gemma family (`tokenizer.ggml.model` "llama" in a
`gemma`, `gemma2` or `gemma3` file). The result is the tokenizer transformers' converter makes from the
same file, token for token (`tests/models/test_gemma.py` compares them): byte fallback, spaces
as "▁" without a prefix space, the merges implied by the vocabulary in the order its tokens are listed
(Gemma's scores do not follow the merge order; a token of spaces is stored as spaces and renamed to
"▁"s), control tokens as special tokens and user-defined ones (such as "\\n") as added tokens matched
whole, `<bos>` added in front by `encode` unless `add_special_tokens=False`. Any other tokenizer a GGUF
file holds is converted by transformers.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

_MAGIC = b"GGUF"
# GGUF value types: numpy dtypes of the fixed-size ones; 7 bool, 8 string, 9 array
_NUMERIC = {
    0: np.uint8,
    1: np.int8,
    2: np.uint16,
    3: np.int16,
    4: np.uint32,
    5: np.int32,
    6: np.float32,
    10: np.uint64,
    11: np.int64,
    12: np.float64,
}
_BOOL, _STRING, _ARRAY = 7, 8, 9
_SENTENCEPIECE_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
_CONTROL, _USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values


def _string(fh: BinaryIO) -> str:
    (size,) = struct.unpack("<Q", fh.read(8))
    return fh.read(size).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, kind: int) -> Any:
    if kind in _NUMERIC:
        dtype = np.dtype(_NUMERIC[kind]).newbyteorder("<")
        return np.frombuffer(fh.read(dtype.itemsize), dtype)[0].item()
    if kind == _BOOL:
        return fh.read(1) != b"\x00"
    if kind == _STRING:
        return _string(fh)
    if kind == _ARRAY:
        item, count = struct.unpack("<IQ", fh.read(12))
        if item in _NUMERIC:
            dtype = np.dtype(_NUMERIC[item]).newbyteorder("<")
            return np.frombuffer(fh.read(dtype.itemsize * count), dtype).tolist()
        return [_value(fh, item) for _ in range(count)]
    raise ValueError(f"unknown GGUF value type {kind}")


def read_metadata(path: Path) -> dict[str, Any]:
    """The key-value metadata of a GGUF file (version 2 or 3), arrays as lists."""
    with path.open("rb") as fh:
        if fh.read(4) != _MAGIC:
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic)")
        version, _tensors, count = struct.unpack("<IQQ", fh.read(20))
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        out: dict[str, Any] = {}
        for _ in range(count):
            key = _string(fh)
            (kind,) = struct.unpack("<I", fh.read(4))
            out[key] = _value(fh, kind)
    return out


def _merges(tokens: list[str]) -> list[tuple[str, str]]:
    """The merges a BPE vocabulary implies: every split of a token into two tokens, ranked by the
    token's place in the list (a token listed twice counts at its last place), the longer left part
    first (what transformers' `generate_merges` gives with the places as scores)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for token in sorted(vocab, key=vocab.__getitem__):
        for cut in range(len(token) - 1, 0, -1):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                merges.append((left, right))
    return merges


def sentencepiece_bpe(metadata: dict[str, Any]) -> Any:
    """A `PreTrainedTokenizerFast` for the Gemma-family vocabulary in `metadata` (see the module
    docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    raw = list(metadata["tokenizer.ggml.tokens"])
    types = list(metadata.get("tokenizer.ggml.token_type") or [1] * len(raw))
    tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in raw]
    vocab = {t: i for i, t in enumerate(tokens)}

    def named(key: str) -> str | None:
        index = metadata.get(f"tokenizer.ggml.{key}")
        return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else None

    unk, bos, eos, pad = (
        named(k) for k in ("unknown_token_id", "bos_token_id", "eos_token_id", "padding_token_id")
    )
    core = Tokenizer(
        BPE(
            vocab=vocab,
            merges=_merges(tokens),
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=True,
            dropout=None,
        )
    )
    core.normalizer = normalizers.Replace(" ", "\u2581")
    core.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    core.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    core.add_special_tokens(
        [
            AddedToken(t, normalized=False, special=True)
            for t, k in zip(tokens, types, strict=True)
            if k == _CONTROL
        ]
    )
    core.add_tokens(
        [
            AddedToken(t, normalized=False, special=False)
            for t, k in zip(raw, types, strict=True)
            if k == _USER_DEFINED and t in vocab  # as transformers: a token of spaces is renamed, not added
        ]
    )
    if bos is not None and metadata.get("tokenizer.ggml.add_bos_token", True):
        core.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, vocab[bos])]
        )
    mask = "<mask>" if "<mask>" in vocab else None
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        pad_token=pad,
        mask_token=mask,
        padding_side="left",
    )


def gguf_tokenizer(path: Path) -> Any:
    """The tokenizer a GGUF file holds: built here for the Gemma family, else by transformers."""
    metadata = read_metadata(path)
    architecture = metadata.get("general.architecture")
    if metadata.get("tokenizer.ggml.model") == "llama" and architecture in _SENTENCEPIECE_ARCHITECTURES:
        return sentencepiece_bpe(metadata)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
