"""Which paths of a SWE workspace a submission may change.

A fix changes library code only: `.py` files under the repository's library paths (`RepoSpec.library`).
Everything else belongs to the test harness and is always taken from the pristine image: test files,
every `conftest.py`, configuration (pyproject.toml, setup.cfg, tox.ini, pytest.ini, ...), the bundled
runner (`.tg/`), and files Python or pytest would pick up on their own (`sitecustomize.py`,
`usercustomize.py`, `*.pth`, modules shadowing pytest, pluggy or the standard library's test machinery).
A submission's change to a *protected* path is never applied and is flagged; a change to any other path
that is not library code (a scratch file) is ignored.
"""

from __future__ import annotations

from typing import Literal

from trialground.tasks.swe.repos import RepoSpec, is_library

PathClass = Literal["library", "protected", "other"]

_CONFIG = {"pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", "setup.py", "noxfile.py", ".coveragerc"}
_STARTUP = {"sitecustomize.py", "usercustomize.py", "conftest.py"}
_SHADOWS = {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "pygments", "unittest", "doctest"}


def is_test_path(path: str) -> bool:
    """Test files and test directories, by the usual pytest naming."""
    parts = path.split("/")
    name = parts[-1]
    if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(p.lower() in ("tests", "test", "testing") for p in parts[:-1])


def classify(spec: RepoSpec, path: str) -> PathClass:
    parts = path.split("/")
    name = parts[-1]
    top = parts[0].removesuffix(".py")
    if (
        parts[0] == ".tg"
        or is_test_path(path)
        or name in _STARTUP
        or name.endswith(".pth")
        or (len(parts) == 1 and name in _CONFIG)
        or top in _SHADOWS
        or "__pycache__" in parts
    ):
        return "protected"
    if name.endswith(".py") and is_library(spec, path):
        return "library"
    return "other"


def valid_path(path: str) -> bool:
    """A plain relative path: no absolute path, no `..`, no empty or dot component, no NUL or newline."""
    if not path or path.startswith("/") or any(c in path for c in "\0\n\r"):
        return False
    return all(p not in ("", ".", "..") for p in path.split("/"))
