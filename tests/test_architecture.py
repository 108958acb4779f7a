"""The architecture as a contract: the layer contract holds (import-linter), no module of `trialground/`
takes part in an import circle, every grader comes from its factory, and what an environment hands up is
typed (no untyped dict other layers read)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "trialground"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every import, lazy and TYPE_CHECKING ones included; importing `a.b.c` also imports `a.b` and `a`
    (their `__init__` runs), except a module's own ancestors."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for n in names:
                while n and n not in mods:
                    n = n.rsplit(".", 1)[0] if "." in n else ""
                while n:
                    if n != m and not m.startswith(n + "."):
                        edges[m].add(n)
                    n = n.rsplit(".", 1)[0] if "." in n else ""
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_layer_contract_holds() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed (the dev extra)")
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "KEPT" in done.stdout


def test_no_module_is_in_an_import_circle() -> None:
    assert _circles(_edges(_modules())) == []


def test_the_circle_finder_can_fail() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_grader_comes_from_its_factory() -> None:
    makers = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Grader":
                makers.append(name)
    assert makers == ["trialground.verify.grader"]  # make_grader, the factory


def test_what_an_episode_hands_up_is_typed() -> None:
    from trialground.envs.base import EpisodeEnd, EpisodeStart, Observation

    for model in (Observation, EpisodeStart, EpisodeEnd):
        for field, info in model.model_fields.items():
            annotation = str(info.annotation)
            assert "dict[str, typing.Any]" not in annotation and "Any" not in annotation, (model, field)
    assert typing.get_type_hints(Observation)["end"] is not None
