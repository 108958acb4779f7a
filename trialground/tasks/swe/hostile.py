"""Hostile submissions for a SWE task: each must earn nothing (`tasks validate` grades every one).

Each is a unified diff against the task's starting workspace, built from the task itself so it fits any
repository: the empty patch, deleting the test files of the FAIL_TO_PASS tests, editing them so every
assert holds, a root conftest.py plugin that turns every test into a no-op, a sitecustomize.py doing the
same, patching the bundled pytest, library code that patches pytest at import, and library code that
exits the test process early with status 0.
"""

from __future__ import annotations

import re

from trialground.tasks.model import Task
from trialground.tasks.swe.patch import make_patch
from trialground.tasks.swe.paths import is_test_path
from trialground.tasks.verifiers import SweTestsParams

NOOP_PLUGIN = (
    "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n"
    "    item.runtest = lambda: None\n"
)
_PATCH_PYTEST = "\nimport _pytest.python as _tg_py\n\n_tg_py.Function.runtest = lambda self: None\n"
_EXIT = "\nimport os as _tg_os\n\n_tg_os._exit(0)\n"
# A report line without the run's key, written to every descriptor that may be the runner's stdout copy
_FORGE = (
    "\nimport json as _tg_json, os as _tg_os\n\n"
    "_tg_line = ('TGSWE ' + _tg_json.dumps({'exit': 0, 'outcomes': {}, 'collected': [], 'details': {},\n"
    "            'finished': True, 'tampered': []}) + ' ' + '0' * 64 + '\\n').encode()\n"
    "for _tg_fd in range(1, 16):\n"
    "    try:\n"
    "        _tg_os.write(_tg_fd, _tg_line)\n"
    "    except OSError:\n"
    "        pass\n"
)
# Replaces every test function's code with a no-op once the tests run (after collection)
_REWRITE_TESTS = (
    "\nimport sys as _tg_sys, threading as _tg_threading, time as _tg_time\n\n\n"
    "def _tg_rewrite():\n"
    "    noop = (lambda *a, **k: None).__code__\n"
    "    def running():  # collection is over once a test function is on some stack\n"
    "        for frame in _tg_sys._current_frames().values():\n"
    "            while frame is not None:\n"
    "                if frame.f_code.co_name == 'pytest_runtest_call':\n"
    "                    return True\n"
    "                frame = frame.f_back\n"
    "        return False\n\n"
    "    while not running():\n"
    "        _tg_time.sleep(0.0005)\n"
    "    for _ in range(500):\n"
    "        for name, mod in list(_tg_sys.modules.items()):\n"
    "            if 'test' not in name:\n"
    "                continue\n"
    "            for key, value in list(vars(mod).items()):\n"
    "                if key.startswith('test') and getattr(value, '__closure__', 1) is None:\n"
    "                    try:\n"
    "                        value.__code__ = noop\n"
    "                    except (AttributeError, ValueError, TypeError):\n"
    "                        pass\n"
    "        _tg_time.sleep(0.002)\n\n\n"
    "_tg_threading.Thread(target=_tg_rewrite, daemon=True).start()\n"
)


def hostile_patches(task: Task) -> dict[str, str]:
    """{label: patch} (see the module docstring)."""
    files = task.files
    f2p = task.verifier.params_as(SweTestsParams).fail_to_pass
    test_files = sorted({t.split("::", 1)[0] for t in f2p if t.split("::", 1)[0] in files})
    library = str(task.metadata.get("bug_path") or "")
    if library not in files:
        library = next((p for p in sorted(files) if p.endswith(".py") and not is_test_path(p)
                        and not p.startswith(".tg/")), "")  # fmt: skip
    runner = ".tg/site/_pytest/python.py"
    out = {
        "empty": "",
        "delete_failing_tests": make_patch(files, {p: None for p in test_files}),
        "edit_failing_tests": make_patch(
            files, {p: re.sub(r"\bassert\b(?!\s+True or)", "assert True or", files[p]) for p in test_files}
        ),
        "conftest_plugin": make_patch(files, {"conftest.py": NOOP_PLUGIN}),
        "sitecustomize": make_patch(
            files, {"sitecustomize.py": NOOP_PLUGIN.replace("item.runtest", "item.x") + _PATCH_PYTEST}
        ),
    }
    if runner in files:
        out["patch_runner"] = make_patch(files, {runner: files[runner] + _PATCH_PYTEST})
    if library:
        out["library_patches_pytest"] = make_patch(files, {library: files[library] + _PATCH_PYTEST})
        out["library_exits_early"] = make_patch(files, {library: files[library] + _EXIT})
        out["library_forges_report"] = make_patch(files, {library: files[library] + _FORGE})
        out["library_rewrites_tests"] = make_patch(files, {library: files[library] + _REWRITE_TESTS})
    return out
