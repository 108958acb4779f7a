"""The real repositories SWE tasks are built from: pinned source distributions, fetched once, cached.

Each `RepoSpec` names one PyPI source distribution by exact version, URL and sha256. `repo_files(spec)`
returns the unpacked tree as {relative path: text}: downloaded on first use (`fetch`), checked against the
pinned hash before it is opened, unpacked in memory with every member checked (regular files only, no
absolute paths or `..`, size caps), and cached under `cache_dir()` (`TRIALGROUND_SWE_CACHE`, default
`~/.cache/trialground/swe/`) as `sdists/<file>`. A cached sdist is re-hashed on every use, so a corrupted
cache is refused, never used.

Which files of the tree are library code (what a fix may change) is the spec's `library` list; everything
else (tests, conftest, configuration, packaging) is part of the test harness and is never taken from a
submission (`trialground.tasks.swe.paths`).
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from trialground.errors import TaskError

_MAX_SDIST = 20 << 20
_MAX_MEMBER = 4 << 20
_MAX_MEMBERS = 5000


@dataclass(frozen=True)
class RepoSpec:
    """One pinned source distribution and how its suite runs.

    `library`: repository-relative paths (files, or directories ending in "/") of the library's code;
    `tests`: the paths handed to pytest; `drop`: paths left out of the workspace (tests that need packages
    the sandbox has not got, or the network); `mutate`: where bugs are injected (default: all of
    `library`; a large library whose suite is restricted to a subset names the modules that subset
    tests); `pytest_args`: extra arguments of every pytest run, the build's, the grader's and the
    agent's alike (e.g. `-o pythonpath=Lib` for a `Lib/` layout)."""

    name: str
    version: str
    url: str
    sha256: str
    library: tuple[str, ...]
    tests: tuple[str, ...]
    drop: tuple[str, ...] = ()
    description: str = ""
    mutate: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_PYPI = "https://files.pythonhosted.org/packages"

REPOS: dict[str, RepoSpec] = {
    spec.name: spec
    for spec in (
        RepoSpec(
            name="inflection",
            version="0.5.1",
            url=f"{_PYPI}/e1/7e/691d061b7329bc8d54edbf0ec22fbfb2afe61facb681f9aaa9bff7a27d04/"
            "inflection-0.5.1.tar.gz",
            sha256="1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
            library=("inflection/",),
            tests=("test_inflection.py",),
            description="string inflections (pluralize, camelize, ...): one 400-line module, 455 tests",
        ),
        RepoSpec(
            name="parse",
            version="1.22.4",
            url=f"{_PYPI}/9e/0f/4bada23d2848aaa61f3577181dbd83895fa49fb9beb406835ed7eaca1b96/"
            "parse-1.22.4.tar.gz",
            sha256="706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5",
            library=("parse/",),
            tests=("tests",),
            description="the reverse of format(): a 1,100-line parser, 110 tests",
        ),
        RepoSpec(
            name="boltons",
            version="26.2.0",
            url=f"{_PYPI}/71/56/14c4a4931910a81ddeccfbe227925ea738e3c445d3e2af960f0bcbba1616/"
            "boltons-26.2.0.tar.gz",
            sha256="d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
            library=("boltons/",),
            tests=("tests",),
            drop=("tests/test_socketutils.py",),
            description="utility modules (iterutils, strutils, cacheutils, ...): 17,000 lines, ~500 tests",
        ),
        RepoSpec(
            name="more-itertools",
            version="11.2.1",
            url=f"{_PYPI}/52/b8/c63995bebbb9ac9c059350e0fb8c82c2420c85aeca7d34e40aecf3df9281/"
            "more_itertools-11.2.1.tar.gz",
            sha256="cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
            library=("more_itertools/",),
            tests=("tests",),
            description="iterator building blocks: 7,000 lines, ~770 tests (a slow suite: ~15 s)",
        ),
        RepoSpec(
            name="fonttools",
            version="4.55.3",
            url=f"{_PYPI}/76/61/a300d1574dc381393424047c0396a0e213db212e28361123af9830d71a8d/"
            "fonttools-4.55.3.tar.gz",
            sha256="3983313c2a04d6cc1fe9251f8fc647754cf49a61dac6cb1e7249ae67afaafc45",
            library=("Lib/fontTools/",),
            tests=("Tests/misc", "Tests/pens"),
            mutate=("Lib/fontTools/misc/", "Lib/fontTools/pens/"),
            pytest_args=("-o", "pythonpath=Lib"),
            description="font tools: 2,480 files in the sdist, 100,000+ library lines; the suite is "
            "restricted to Tests/misc and Tests/pens and bugs to the modules they test",
        ),
    )
}


def repo_spec(name: str) -> RepoSpec:
    """The spec called `name`; TaskError naming the known ones otherwise."""
    if name not in REPOS:
        raise TaskError(
            f"swe: unknown repository {name!r}; known: {', '.join(sorted(REPOS))}", kind="bad_spec"
        )
    return REPOS[name]


def cache_dir() -> Path:
    return Path(os.environ.get("TRIALGROUND_SWE_CACHE") or Path.home() / ".cache" / "trialground" / "swe")


def fetch(spec: RepoSpec) -> bytes:
    """The sdist's bytes, verified against the pinned sha256 (downloaded into the cache when missing)."""
    path = cache_dir() / "sdists" / spec.filename
    if path.exists():
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == spec.sha256:
            return data
        raise TaskError(
            f"swe: cached {path} does not match the pinned sha256 {spec.sha256}; delete it to refetch",
            kind="bad_cache",
        )
    try:
        with urllib.request.urlopen(spec.url, timeout=60) as resp:
            data = resp.read(_MAX_SDIST + 1)
    except OSError as e:
        raise TaskError(f"swe: could not download {spec.url}: {e}", kind="fetch") from e
    if len(data) > _MAX_SDIST:
        raise TaskError(f"swe: {spec.url} is larger than {_MAX_SDIST} bytes", kind="fetch")
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise TaskError(f"swe: {spec.url} has sha256 {digest}, pinned {spec.sha256}", kind="fetch")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


def unpack(spec: RepoSpec, data: bytes) -> dict[str, str]:
    """The sdist's text files, paths relative to its top directory. Members that are not regular files,
    escape the top directory, or are not UTF-8 text are left out; `spec.drop` too."""
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        if len(members) > _MAX_MEMBERS:
            raise TaskError(f"swe: {spec.filename} has more than {_MAX_MEMBERS} members", kind="fetch")
        for m in members:
            if not m.isreg() or m.size > _MAX_MEMBER:
                continue
            parts = m.name.split("/")
            if len(parts) < 2 or m.name.startswith("/") or any(p in ("", ".", "..") for p in parts[1:]):
                continue
            rel = "/".join(parts[1:])
            if _dropped(rel, spec.drop) or "__pycache__" in parts or rel.endswith((".pyc", ".pyo")):
                continue
            handle = tar.extractfile(m)
            if handle is None:
                continue
            try:
                files[rel] = handle.read().decode("utf-8")
            except UnicodeDecodeError:
                continue
    if not files:
        raise TaskError(f"swe: {spec.filename} holds no text files", kind="fetch")
    return files


def _dropped(rel: str, drop: tuple[str, ...]) -> bool:
    return any(rel == d or rel.startswith(d.rstrip("/") + "/") for d in drop)


def repo_files(spec: RepoSpec) -> dict[str, str]:
    """The pristine tree of `spec` (fetched and verified; see the module docstring)."""
    return unpack(spec, fetch(spec))


def _under(path: str, entries: tuple[str, ...]) -> bool:
    return any((entry.endswith("/") and path.startswith(entry)) or path == entry for entry in entries)


def is_library(spec: RepoSpec, path: str) -> bool:
    """Whether `path` is library code of `spec` (a fix may change it)."""
    return _under(path, spec.library)


def is_mutable(spec: RepoSpec, path: str) -> bool:
    """Whether bugs are injected into `path`: library code under `spec.mutate` (all library code when
    `mutate` is empty)."""
    return is_library(spec, path) and (not spec.mutate or _under(path, spec.mutate))
