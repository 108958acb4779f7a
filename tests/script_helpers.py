"""Load a repository script (`scripts/`, `benchmarks/`) as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """`relative` to the repository root, e.g. "scripts/pretrain_agent.py"; registered in `sys.modules`
    under its file name (dataclasses and pickling look it up there); loaded once per test process."""
    path = ROOT / relative
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
