"""Run a code task's check files against a submission in a subprocess (no sandbox: trusted test data).

Used by the tests to prove the bundled data is sound (the canonical solution passes every check, a
trivial submission fails); the real grading path lives in trialground.verify.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from trialground.tasks.model import Task

_DRIVER = r"""
import importlib, json, sys
results = {}
for mod_name in sys.argv[1:]:
    try:
        mod = importlib.import_module(mod_name)
    except BaseException as e:
        results[mod_name] = "collect-error: %r" % (e,)
        continue
    for name in sorted(n for n in vars(mod) if n.startswith("test_")):
        try:
            getattr(mod, name)()
            results[mod_name + "::" + name] = "passed"
        except BaseException as e:
            results[mod_name + "::" + name] = "failed: %r" % (e,)
print(json.dumps(results))
"""


def run_checks(task: Task, submission: str, *, which: str = "hidden", timeout: float = 60) -> dict[str, str]:
    """{test id: 'passed' | 'failed: ...'} for the task's hidden or visible checks."""
    checks = task.hidden_checks if which == "hidden" else task.visible_checks
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / task.verifier.params.get("solution_path", "solution.py")).write_text(submission)
        for rel, text in checks.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        modules = [rel[:-3].replace("/", ".") for rel in checks]
        proc = subprocess.run(
            [sys.executable, "-c", _DRIVER, *modules], cwd=root, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            return {"driver": f"failed: {proc.stderr[-2000:]}"}
        return json.loads(proc.stdout.strip().splitlines()[-1])
