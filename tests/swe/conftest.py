"""Shared, expensive set-up of the SWE tests: one small real repository (inflection, 455 tests), its task
set built once per session with three candidate bugs, in a cache of the session's own (the sdist itself is
reused from the user's cache when present, so CI downloads it once)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from trialground.errors import TaskError
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.tasks.model import Task

SOURCE = "swe:inflection:3"


@pytest.fixture(scope="session")
def swe_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from trialground.tasks.swe.repos import cache_dir, fetch, repo_spec

    spec = repo_spec("inflection")
    user = cache_dir() / "sdists" / spec.filename
    cache = tmp_path_factory.mktemp("swe-cache")
    old = os.environ.get("TRIALGROUND_SWE_CACHE")
    os.environ["TRIALGROUND_SWE_CACHE"] = str(cache)
    try:
        if user.exists():
            (cache / "sdists").mkdir()
            shutil.copy(user, cache / "sdists" / spec.filename)
        try:
            fetch(spec)
        except TaskError as e:
            pytest.skip(f"the inflection sdist is neither cached nor downloadable: {e}")
        if not user.exists():  # kept for later sessions; renamed into place, as another worker may read it
            user.parent.mkdir(parents=True, exist_ok=True)
            part = user.with_name(f".{user.name}.{os.getpid()}")
            shutil.copy(cache / "sdists" / spec.filename, part)
            os.replace(part, user)
        yield cache
    finally:
        if old is None:
            os.environ.pop("TRIALGROUND_SWE_CACHE", None)
        else:
            os.environ["TRIALGROUND_SWE_CACHE"] = old


@pytest.fixture(scope="session")
def swe_tasks(swe_cache: Path) -> list[Task]:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    from trialground.tasks.sources import load_source

    return load_source(SOURCE)
