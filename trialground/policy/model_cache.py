"""Where converted models live: one directory per source, made once, shared by every later load.

`policy.model` may name a model a package ships as a GGUF file (`gemma-3-270m`, `policy/packaged.py`) or
a local `.gguf` file. Either is converted once into a Hugging Face directory (`policy/gguf.py`) under
the cache root: `$TRIALGROUND_MODEL_CACHE`, else `$XDG_CACHE_HOME/trialground/models`, else
`~/.cache/trialground/models`. A directory is complete once it exists under its final name: conversion
writes a temporary sibling and renames it, under a file lock, so two processes never convert one source
twice or read a half-written one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE_ENV = "TRIALGROUND_MODEL_CACHE"


def cache_root() -> Path:
    """The directory converted models are kept in (see the module docstring)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trialground" / "models"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def _locked(root: Path, key: str) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_dir(key: str, make: Callable[[Path], None]) -> Path:
    """The cache directory `key`, made by `make(tmp)` (which fills the empty directory `tmp`) the first time.

    Complete directories are returned at once; a failed `make` leaves nothing behind."""
    root = cache_root()
    final = root / key
    if (final / "config.json").is_file():
        return final
    with _locked(root, key):
        if (final / "config.json").is_file():  # another process made it while this one waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it private; a model directory is read by every user
        try:
            make(tmp)
            if final.exists():  # a leftover without config.json: incomplete, replaced
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final
