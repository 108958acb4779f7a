"""The test runner a SWE workspace carries: pytest and its dependencies, as plain files under `.tg/site/`.

The sandbox shows the host's Python runtime without its site-packages, so pytest travels in the workspace
image: the pure-Python files of the `pytest` installed here (the `swe` extra) and of its dependencies
(pluggy, iniconfig, packaging, and the pygments modules pytest imports). `.tg/pytest.py` starts it the way
the grader does (`python3 -I -S .tg/pytest.py [pytest args]`), for the agent's own runs.

The bundle belongs to the harness: a submission never changes it (`trialground.tasks.swe.paths`); every
grading runs the image's copy.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

from trialground.errors import TaskError
from trialground.tasks.swe.sandboxed import program_source

SITE = ".tg/site"
LAUNCHER = ".tg/pytest.py"

_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging")
_MODULES = ("py",)
# Which pygments modules pytest pulls in (it imports pygments at start-up for its terminal writer)
_PROBE = (
    "import sys, pytest, _pytest._io.terminalwriter, _pytest.doctest, _pytest.pytester\n"
    "print(__import__('json').dumps(sorted(m.__file__ for n, m in list(sys.modules.items())\n"
    "    if n.split('.')[0] == 'pygments' and getattr(m, '__file__', None))))\n"
)

LAUNCHER_SOURCE = program_source("launcher.py")


@functools.cache
def bundle_files() -> dict[str, str]:
    """{workspace path: text} of the bundled runner (cached for the process)."""
    try:
        import pytest  # noqa: F401
    except ImportError as e:
        raise TaskError(
            "swe tasks need pytest on the host to bundle into the workspace: pip install 'trialground[swe]'",
            kind="missing_dependency",
        ) from e
    out: dict[str, str] = {}
    for name in _PACKAGES:
        pkg = importlib.import_module(name)
        root = Path(pkg.__file__ or "").parent
        for path in sorted(root.rglob("*")):
            if path.is_file() and (path.suffix == ".py" or path.name == "py.typed"):
                out[f"{SITE}/{name}/{path.relative_to(root).as_posix()}"] = path.read_text("utf-8")
    for name in _MODULES:
        mod = importlib.import_module(name)
        if mod.__file__:
            out[f"{SITE}/{name}.py"] = Path(mod.__file__).read_text("utf-8")
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        raise TaskError(
            f"swe: could not list pytest's pygments modules: {probe.stderr[-300:]}", kind="bundle"
        )
    import pygments

    root = Path(pygments.__file__ or "").parent
    for file in json.loads(probe.stdout):
        rel = Path(file).relative_to(root).as_posix()
        out[f"{SITE}/pygments/{rel}"] = Path(file).read_text("utf-8")
    out[LAUNCHER] = LAUNCHER_SOURCE
    return out


@functools.cache
def bundle_digest() -> str:
    """A hash of the bundled packages (part of a task set's cache key: another pytest, another set). The
    launcher and the harness plugin are not part of it: they do not change which tests pass."""
    h = hashlib.sha256()
    for path, text in sorted(bundle_files().items()):
        if not path.startswith(SITE + "/"):
            continue
        h.update(path.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]
