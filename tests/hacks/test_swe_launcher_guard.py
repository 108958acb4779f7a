"""The repository-task launcher's own checks (`bundle.LAUNCHER_SOURCE`), with the static diff policy out of
the way: library code that patches pytest's test running, its hooks, a test's code or the process's exit
makes the run fail, and an audit hook refuses rewriting a test's code in place. Real bubblewrap sandboxes, the
real bundled pytest, the command grading and the agent's `run_tests` run."""

from __future__ import annotations

import asyncio

import pytest

from trialground.sandbox.base import WORKSPACE, Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.swe.bundle import LAUNCHER, bundle_files
from trialground.tasks.swe.harness import TEST_ENV

pytestmark = pytest.mark.slow

TESTS = (
    "import mylib\n\n\ndef test_a_touch():\n    assert mylib.touch() is None\n\n\n"
    "def test_add():\n    assert mylib.add(2, 2) == 4\n\n\ndef test_other():\n    assert 1\n"
)
BUGGY = "def touch():\n    return None\n\n\ndef add(a, b):\n    return a + b + 1\n"
FIXED = "def touch():\n    return None\n\n\ndef add(a, b):\n    return a + b\n"
# From inside a test, up the stack to pytest's `item`: what later tests of the same process run
_FIND_ITEM = (
    "import sys\n\ndef _item():\n    f = sys._getframe(1)\n    while f is not None:\n"
    "        it = f.f_locals.get('item')\n        if it is not None and hasattr(it, 'session'):\n"
    "            return it\n        f = f.f_back\n\n"
)
# Each is appended to the buggy module, so the named test fails unless the attack works.
ATTACKS = {
    "runtest_patched": "import sys\nsys.modules['_pytest.python'].Function.runtest = lambda self: None\n",
    "call_and_report_patched": (
        "import sys\n_r = sys.modules['_pytest.runner']\n_orig = _r.call_and_report\n"
        "def _car(item, when, log=True, **kw):\n"
        "    rep = _orig(item, when, log=False, **kw)\n"
        "    rep.outcome = 'passed'\n    rep.longrepr = None\n"
        "    item.ihook.pytest_runtest_logreport(report=rep)\n    return rep\n"
        "_r.call_and_report = _car\n"
    ),
    "test_code_swapped": _FIND_ITEM
    + (
        "def touch():\n    items = {it.name: it for it in _item().session.items}\n"
        "    items['test_add']._obj = items['test_other'].obj\n"
    ),
    "report_outcome_forced": (
        "import sys\n_rep = sys.modules['_pytest.reports']\n"
        "_rep.BaseReport.failed = property(lambda self: False)\n"
        "_rep.BaseReport.passed = property(lambda self: True)\n"
    ),
    "gc_walk": (
        "import gc, sys\n\ndef touch():\n    kind = sys.modules['_pytest.python'].Function\n"
        "    for it in [o for o in gc.get_objects() if type(o) is kind]:\n"
        "        it.runtest = lambda: None\n"
    ),
    "test_code_rewritten": _FIND_ITEM
    + (
        "def touch():\n    items = {it.name: it for it in _item().session.items}\n"
        "    items['test_add'].obj.__code__ = items['test_other'].obj.__code__\n"
    ),
    "later_items_shadowed": _FIND_ITEM
    + ("def touch():\n    for it in _item().session.items:\n        it.runtest = lambda: None\n"),
    "hook_functions_replaced": _FIND_ITEM
    + (
        "def touch():\n    hook = _item().config.pluginmanager.hook\n"
        "    for impl in hook.pytest_pyfunc_call.get_hookimpls():\n"
        "        impl.function = lambda *a, **k: True\n"
    ),
    "plugin_registered": _FIND_ITEM
    + (
        "class _Pass:\n    def pytest_runtest_logreport(self, report):\n        report.outcome = 'passed'\n\n"
        "def touch():\n    _item().config.pluginmanager.register(_Pass())\n"
    ),
}

# Data, not bindings: after the failing report, a session finalizer rewrites what pytest and the
# launcher's plugin counted, so the test process itself exits 0. The failure was sent to the waiting
# parent the moment pytest reported it, and the parent decides.
_PLUGIN = (
    "def _plugin(it):\n"
    "    return [p for p in it.config.pluginmanager.get_plugins() if hasattr(p, 'named')][0]\n\n"
)
DATA_ATTACKS = {
    "counts_rewritten_after_the_failure": _FIND_ITEM
    + _PLUGIN
    + (
        "def _forge(it):\n    p, s = _plugin(it), it.session\n"
        "    tr = it.config.pluginmanager.get_plugin('terminalreporter')\n"
        "    s.testsfailed = 0\n    failed = tr.stats.pop('failed', [])\n"
        "    for rep in failed:\n        rep.outcome = 'passed'\n"
        "    tr.stats.setdefault('passed', []).extend(failed)\n"
        "    p.bad.clear()\n    p.passed.update(p.named)\n\n"
        "def touch():\n    it = _item()\n    it.session.addfinalizer(lambda: _forge(it))\n"
    ),
    "named_set_emptied": _FIND_ITEM
    + _PLUGIN
    + (
        "def _forget(it):\n    it.session.testsfailed = 0\n\n"
        "def touch():\n    it = _item()\n    _plugin(it).named.clear()\n"
        "    it.session.addfinalizer(lambda: _forget(it))\n"
    ),
}
# what the waiting parent says when the test process exits 0 all the same
DATA_VERDICTS = {
    "counts_rewritten_after_the_failure": "named test failed: tests/test_lib.py::test_add",
    "named_set_emptied": "3 named test(s) not reported passed",
}


NAMED = tuple(f"tests/test_lib.py::{name}" for name in ("test_a_touch", "test_add", "test_other"))


def _run(library: str, nodes: tuple[str, ...] = NAMED) -> tuple[int | None, str]:
    async def go() -> tuple[int | None, str]:
        files = {**bundle_files(), "mylib.py": library, "tests/test_lib.py": TESTS}
        sandbox = await open_sandbox(SandboxConfig(), files)
        try:
            argv = ["python3", "-I", "-S", LAUNCHER, "-q", "-rfE", *nodes]
            res = await sandbox.exec(argv, env=TEST_ENV, cwd=WORKSPACE, limits=Limits(wall_s=120, cpu_s=120))
            return res.exit_code, res.stdout + res.stderr
        finally:
            await sandbox.close()

    return asyncio.run(go())


def test_an_honest_library_passes_or_fails_on_its_merits() -> None:
    code, out = _run(FIXED)
    assert code == 0 and "3 passed" in out and "tampered" not in out, out
    code, out = _run(BUGGY)
    assert code == 1 and "1 failed, 2 passed" in out and "tampered" not in out, out


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_library_code_that_reaches_the_harness_fails_the_run(attack: str) -> None:
    code, out = _run(BUGGY + "\n" + ATTACKS[attack])
    assert code != 0, out
    assert "tampered" in out or "refused in a test run" in out, out


@pytest.mark.parametrize("attack", sorted(DATA_ATTACKS))
def test_a_failure_once_reported_cannot_be_taken_back(attack: str) -> None:
    code, out = _run(BUGGY + "\n" + DATA_ATTACKS[attack])
    assert code != 0, out
    assert f"run failed ({DATA_VERDICTS[attack]}), although the test process exited 0" in out, out
