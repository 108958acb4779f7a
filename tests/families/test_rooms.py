"""Every family folder is a room of the same shape: a `source.py` whose `load` the source registry names by
dotted path, a place in the import-linter contract that keeps families independent, and experts and kinds
that resolve."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import trialground.families
from trialground.families.experts import EXPERTS
from trialground.registry import import_path
from trialground.tasks.sources import known
from trialground.tasks.verifiers import KINDS

ROOT = Path(trialground.families.__file__).parent
FOLDERS = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))


def _contract_modules() -> set[str]:
    pyproject = tomllib.loads((ROOT.parents[1] / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    (independence,) = [c for c in contracts if c["type"] == "independence" and "families" in c["name"]]
    return set(independence["modules"])


def test_every_family_folder_is_registered_by_its_load_and_kept_independent() -> None:
    assert len(FOLDERS) >= 17
    loads = {s.load for s in known() if isinstance(s.load, str)}
    missing_contract = [f for f in FOLDERS if f"trialground.families.{f}" not in _contract_modules()]
    assert missing_contract == [], "add these to the families' independence contract in pyproject.toml"
    for folder in FOLDERS:
        path = f"trialground.families.{folder}.source:load"
        assert path in loads, f"{folder}: no source registered as {path}"
        assert callable(import_path(path, what=folder, error=ValueError))


def test_experts_and_family_kinds_resolve_inside_their_own_folders() -> None:
    for family, path in EXPERTS.items():
        assert path.startswith(f"trialground.families.{family.partition(':')[0]}."), (family, path)
        assert callable(import_path(path, what=family, error=ValueError))
    family_kinds = [k for k in KINDS.entries() if isinstance(k.verify, str) and ".families." in k.verify]
    assert family_kinds, "hackable's failed_tests lives in its family"
    for kind in family_kinds:
        module = kind.verify.partition(":")[0]
        assert importlib.import_module(module).__name__.split(".")[2] in FOLDERS
        assert callable(kind.function())
