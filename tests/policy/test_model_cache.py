"""The model cache: a directory is made once, completely or not at all, and its root is overridable;
packaged models and GGUF files are checked before a run (no torch needed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from trialground.orchestrator.preflight import model_problems
from trialground.policy.model_cache import CACHE_ENV, cache_root, cached_dir
from trialground.policy.packaged import MODELS, PackagedModel, package_problem


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fill(out: Path) -> None:
    (out / "config.json").write_text("{}")


def test_the_cache_root_follows_the_environment(_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_root() == _cache
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert cache_root() == Path("/somewhere/trialground/models")


def test_a_directory_is_made_once(_cache: Path) -> None:
    calls: list[Path] = []

    def make(out: Path) -> None:
        calls.append(out)
        _fill(out)

    first = cached_dir("m-1", make)
    assert first == _cache / "m-1" and (first / "config.json").is_file()
    assert cached_dir("m-1", make) == first
    assert len(calls) == 1 and not calls[0].exists()  # made in a temporary sibling, then renamed


def test_concurrent_callers_convert_once(_cache: Path) -> None:
    calls: list[int] = []
    started = threading.Event()

    def make(out: Path) -> None:
        calls.append(1)
        started.set()
        _fill(out)

    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(cached_dir("m-2", make))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1


def test_a_failed_conversion_leaves_nothing(_cache: Path) -> None:
    def broken(out: Path) -> None:
        (out / "half.safetensors").write_text("x")
        raise ValueError("truncated GGUF")

    with pytest.raises(ValueError, match="truncated"):
        cached_dir("m-3", broken)
    assert [p.name for p in _cache.iterdir() if not p.name.endswith(".lock")] == []
    assert (cached_dir("m-3", _fill) / "config.json").is_file()  # the next try starts clean


def test_a_packaged_model_whose_package_is_missing_fails_fast_with_the_install_line() -> None:
    entry = PackagedModel(
        name="test-missing-model",
        module="trialground_no_such_model_package",
        distribution="no-such-model",
        extra="nosuch",
        notices=(),
        terms="",
    )
    MODELS.register(entry, replace=True)
    problem = package_problem("test-missing-model")
    assert problem is not None and "pip install 'trialground[nosuch]'" in problem
    assert model_problems("test-missing-model", "policy.model", weights=True) == [problem]


def test_a_missing_gguf_file_is_a_preflight_problem(tmp_path: Path) -> None:
    problems = model_problems(str(tmp_path / "absent.gguf"), "policy.model", weights=True)
    assert problems and "no such file" in problems[0]
