"""One trainer step of the real Gemma 3 tokenizer vocabulary (262,144) on one sequence of the truncated
model (gemma_kit.py): no operation, forward or backward, makes a vocabulary-sized tensor of more than one
chunk of positions (benchmarks/long_sequence.py runs the full model at 16,384 tokens the same way)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from script_helpers import load_script

pytestmark = pytest.mark.slow


def test_a_long_sequence_step_makes_logits_one_chunk_at_a_time(gemma_dir: Path) -> None:
    bench = load_script("benchmarks/long_sequence.py")
    out = bench.long_step(str(gemma_dir), tokens=320, chunk=64)
    assert out["vocab"] == 262144
    # 319 trained positions in chunks of 64; with one chunk of 319 it would be 319 x 262,144
    assert out["largest_logits"] == 64 * 262144 < out["full"]
    assert math.isfinite(out["loss"])
