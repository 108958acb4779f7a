"""Recorded calls (`tasks/swe/sandboxed/calls.py`, `tasks/swe/calls.py`) on a tiny repository, run as the
shipped program with this interpreter (no sandbox: the sandboxed runs are `tests/hacks/test_swe_attacks.py`).
Recording sees the tests' calls into the library; replaying them needs no test file and sends no outcome;
the host's comparison tells the reference library from a buggy one and from objects that claim equality."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trialground.tasks.swe import calls
from trialground.tasks.swe.sandboxed import calls as prog
from trialground.tasks.swe.sandboxed import program_source

LIB = """
def double(x):
    return 2 * x

def split(s, sep=","):
    return tuple(s.split(sep))

def fill(out, n):
    out.extend(range(n))

class Box:
    def __init__(self, v):
        self.v = v
    def get(self):
        return self.v
    def __eq__(self, other):
        return self.v == other
"""
TESTS = """
import pytest
import tiny

BOX = tiny.Box(5)

@pytest.mark.parametrize(("x", "y"), [(1, 2), (3, 6)])
def test_double(x, y):
    assert tiny.double(x) == y

def test_split():
    assert tiny.split("a,b") == ("a", "b")
    with pytest.raises(AttributeError):
        tiny.split(3)

def test_box():
    assert tiny.Box(7).get() == 7
    assert BOX.get() == 5
    assert BOX == 5

def test_fill():
    out = []
    tiny.fill(out, 3)
    assert out == [0, 1, 2]
"""


def _program(tmp: Path, mode: str, header: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    import pytest as host_pytest

    prog_path = tmp / "calls.py"
    prog_path.write_text(program_source("calls.py"))
    site = str(Path(host_pytest.__file__).parent.parent)
    header = {"site": site, **header}
    return subprocess.run(
        [sys.executable, "-I", "-S", str(prog_path), mode], input=json.dumps(header), text=True,
        capture_output=True, cwd=tmp, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("tiny")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "__init__.py").write_text(LIB)
    (repo / "test_tiny.py").write_text(TESTS)
    out = repo / "record.json"
    header = {"path": [str(repo)], "root": str(repo), "library": ["tiny/"], "args": [],
              "paths": [str(repo / "test_tiny.py")], "out": str(out)}  # fmt: skip
    res = _program(repo, "record", header)
    assert out.exists(), res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(out.read_text())


def _replay(tmp: Path, lib: str, plans: dict[str, Any]) -> dict[str, Any]:
    (tmp / "tiny").mkdir(parents=True, exist_ok=True)
    (tmp / "tiny" / "__init__.py").write_text(lib)
    tests = {t: sent for t, (sent, _) in plans.items()}
    res = _program(tmp, "replay", {"path": [str(tmp)], "tests": tests})
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("TGCALLS ")][-1]
    return json.loads(line[len("TGCALLS ") :])


def test_recording_sees_each_tests_calls_and_nothing_a_test_compares_with(recorded: dict[str, Any]) -> None:
    assert sorted(recorded["passed"]) == sorted(
        ["test_tiny.py::test_double[1-2]", "test_tiny.py::test_double[3-6]", "test_tiny.py::test_split",
         "test_tiny.py::test_box", "test_tiny.py::test_fill"]
    )  # fmt: skip
    plans = calls._plans(recorded)
    sent, outs = plans["test_tiny.py::test_double[3-6]"]
    assert sent[-1]["at"] == {"path": ["tiny", "double"]} and sent[-1]["args"] == [3]
    assert outs[-1] == {"v": 6}
    sent, outs = plans["test_tiny.py::test_split"]
    assert [o.get("v", o.get("raise")) for o in outs[-2:]] == [
        {"$tuple": ["a", "b"]},
        "builtins.AttributeError",
    ]
    sent, outs = plans["test_tiny.py::test_box"]
    # the module's BOX (its prelude), Box(7), .get() on each; `BOX == 5` is not a step: 5 is what it expects
    assert [s["at"].get("new") or s["at"].get("attr") for s in sent] == [["tiny", "Box"], ["tiny", "Box"],
                                                                        "get", "get"]  # fmt: skip
    assert all(5 not in s["args"] for s in sent[1:])
    sent, outs = plans["test_tiny.py::test_fill"]
    assert outs[-1] == {"v": None, "after": [[0, [0, 1, 2]]]}  # the list a call filled
    assert all("out" not in s for steps, _ in plans.values() for s in steps)  # never sent


def test_replay_without_the_tests_tells_the_reference_from_a_bug(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    plans = calls._plans(recorded)
    book = {t: calls.TestCalls(t, tuple(s), tuple(o), tuple(True for _ in o)) for t, (s, o) in plans.items()}
    same = _replay(tmp_path / "ref", LIB, plans)
    assert {t: calls.mismatch(p, same.get(t)) for t, p in book.items()} == dict.fromkeys(book)
    bug = LIB.replace("return 2 * x", "return 2 * x if x < 3 else x")
    off = _replay(tmp_path / "bug", bug, plans)
    assert calls.mismatch(book["test_tiny.py::test_double[3-6]"], off["test_tiny.py::test_double[3-6]"])
    assert (
        calls.mismatch(book["test_tiny.py::test_double[1-2]"], off["test_tiny.py::test_double[1-2]"]) is None
    )
    # an int that says it equals anything is not plain data: it is an object of its own type
    liar = LIB.replace(
        "def double(x):\n    return 2 * x",
        "class S(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def double(x):\n    return S(2 * x)",
    )
    lied = _replay(tmp_path / "liar", liar, plans)
    assert "another outcome" in str(calls.mismatch(book["test_tiny.py::test_double[1-2]"],
                                                    lied["test_tiny.py::test_double[1-2]"]))  # fmt: skip


def test_replay_of_a_library_that_exits_or_floods_is_a_failure_not_an_error(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    plans = calls._plans(recorded)
    book = {t: calls.TestCalls(t, tuple(s), tuple(o), tuple(True for _ in o)) for t, (s, o) in plans.items()}
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "__init__.py").write_text(LIB + "\nimport os\nos._exit(0)\n")
    prog_path = tmp_path / "calls.py"
    prog_path.write_text(program_source("calls.py"))
    header = {"path": [str(tmp_path)], "tests": {t: s for t, (s, _) in plans.items()}}
    res = subprocess.run([sys.executable, "-I", "-S", str(prog_path), "replay"], input=json.dumps(header),
                         text=True, capture_output=True, timeout=60)  # fmt: skip
    assert "TGCALLS" not in res.stdout
    for recorded in book.values():
        assert "no outcomes" in str(calls.mismatch(recorded, None))


def test_plain_data_is_exact_and_bounded() -> None:
    enc = prog.Encoder()
    value = {"a": (1, 2.5, b"x", {3}), 4: [None, True, 2**70, range(1, 9, 2)]}
    data = enc.enc(value)
    assert prog.decode(json.loads(json.dumps(data)), {}) == value

    class Liar(str):
        pass

    for bad in (Liar("x"), [Liar("x")], object(), 2**5000, "x" * (prog.MAX_CHARS + 1)):
        with pytest.raises(prog.NotPlain):
            prog.Encoder().enc(bad)
    deep: list[Any] = []
    for _ in range(prog.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(prog.NotPlain):
        prog.Encoder().enc(deep)
    assert os.path.basename(calls.PROGRAM) == "calls.py"


def test_the_calls_image_holds_the_library_and_the_program_and_nothing_of_the_tests() -> None:
    from trialground.tasks.swe.repos import RepoSpec

    spec = RepoSpec(name="x", version="1", url="u/x.tar.gz", sha256="0", library=("pkg/", "Lib/lib/"),
                    tests=("tests",), pytest_args=("-o", "pythonpath=Lib"))  # fmt: skip
    files = {
        "pkg/__init__.py": "", "pkg/data.txt": "d", "pkg/tests/test_inner.py": "", "pkg/conftest.py": "",
        "Lib/lib/core.py": "", "tests/test_x.py": "", "test_top.py": "", "conftest.py": "", "README.md": "",
        ".tg/pytest.py": "", ".tg/site/pytest/__init__.py": "",
    }  # fmt: skip
    image = calls.calls_image_files(spec, files)
    assert sorted(image) == [".tg/calls.py", "Lib/lib/core.py", "pkg/__init__.py", "pkg/data.txt"]
    assert image[".tg/calls.py"] == program_source("calls.py")
    assert calls.library_path(spec) == ["/workspace", "/workspace/Lib"]
