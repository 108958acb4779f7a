"""An integration whose project is not installed says so in one line that names the extra to install.

The absent package is simulated with `sys.modules[name] = None` in a fresh interpreter (the import then
fails exactly as for a package that is not there), so the test runs whether or not it is installed here."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
sys.modules["verifiers"] = None  # as if `verifiers` were not installed
try:
    {statement}
except ImportError as e:
    print(type(e).__name__)
    print(str(e))
else:
    print("imported")
"""


def _probe(statement: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(statement=statement)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


@pytest.mark.parametrize(
    "statement",
    ["import trialground.integrations.verifiers_v1", "import trialground_verifiers"],
    ids=["verifiers_v1", "trialground_verifiers"],
)
def test_the_verifiers_taskset_without_verifiers_names_the_extra(statement: str) -> None:
    assert "verifiers" in _extras()
    lines = _probe(statement)
    assert len(lines) == 2, lines  # the exception's name and its message, one line
    kind, message = lines
    assert kind == "ModuleNotFoundError"
    assert "pip install 'trialground[verifiers]'" in message and "verifiers" in message.split("needs")[1]


def test_the_classic_verifiers_integration_without_verifiers_says_what_to_install() -> None:
    lines = _probe("from trialground.integrations.verifiers import make_rubric\n    make_rubric(None)")
    assert len(lines) == 2, lines
    kind, message = lines
    assert kind == "ModuleNotFoundError"
    assert "pip install 'verifiers==0.2.1'" in message and "trialground[verifiers]" in message
