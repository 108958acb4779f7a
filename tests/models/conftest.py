"""Shared fixtures: tiny random checkpoints of several architectures, made once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="model tests need the [train] extra (torch, transformers)")
sys.path.insert(0, str(Path(__file__).parent))

from modelkit import ARCHS, make_checkpoint


@pytest.fixture(scope="session")
def arch_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("archs")
    return {arch: make_checkpoint(arch, root / arch, stop_often=True) for arch in ARCHS}


@pytest.fixture(scope="session")
def gemma_dir() -> Path:
    """The truncated real Gemma 3 270M (gemma_kit.py); skipped where the `gemma` extra is not installed."""
    from gemma_kit import gemma_problem, truncated_gemma_dir

    problem = gemma_problem()
    if problem is not None:
        pytest.skip(f"the real-model tests need the package: {problem}")
    return truncated_gemma_dir()
