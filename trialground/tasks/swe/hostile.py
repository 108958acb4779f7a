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

_NOOP_PLUGIN = (
    "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n"
    "    item.runtest = lambda: None\n"
)
_PATCH_PYTEST = "\nimport _pytest.python as _tg_py\n\n_tg_py.Function.runtest = lambda self: None\n"
_EXIT = "\nimport os as _tg_os\n\n_tg_os._exit(0)\n"


def hostile_patches(task: Task) -> dict[str, str]:
    """{label: patch} (see the module docstring)."""
    files = task.files
    f2p = [str(t) for t in task.verifier.params.get("fail_to_pass", [])]
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
        "conftest_plugin": make_patch(files, {"conftest.py": _NOOP_PLUGIN}),
        "sitecustomize": make_patch(
            files, {"sitecustomize.py": _NOOP_PLUGIN.replace("item.runtest", "item.x") + _PATCH_PYTEST}
        ),
    }
    if runner in files:
        out["patch_runner"] = make_patch(files, {runner: files[runner] + _PATCH_PYTEST})
    if library:
        out["library_patches_pytest"] = make_patch(files, {library: files[library] + _PATCH_PYTEST})
        out["library_exits_early"] = make_patch(files, {library: files[library] + _EXIT})
    return out
