"""Run code tasks' check files against submissions in ONE subprocess (no sandbox: trusted test data).

Used by the tests to prove the bundled data is sound (the canonical solution passes every check, a trivial
submission fails). Grading for real goes through trialground.verify in a sandbox.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from trialground.tasks.model import Task

_DRIVER = r"""
import importlib, json, sys
jobs = json.loads(sys.stdin.read())
out = []
for job in jobs:
    sys.path.insert(0, job["dir"])
    for name in ["solution", *job["modules"]]:
        sys.modules.pop(name, None)
    results = {}
    for mod_name in job["modules"]:
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
    sys.path.remove(job["dir"])
    out.append(results)
print(json.dumps(out))
"""


def run_checks_many(
    cases: Sequence[tuple[Task, str]], *, which: str = "hidden", timeout: float = 120
) -> list[dict[str, str]]:
    """For each (task, submission): {module::test: 'passed' | 'failed: ...'} of its hidden/visible checks."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for k, (task, submission) in enumerate(cases):
            root = Path(tmp) / f"case{k}"
            root.mkdir()
            checks = task.hidden_checks if which == "hidden" else task.visible_checks
            (root / task.verifier.params.get("solution_path", "solution.py")).write_text(submission)
            for rel, text in checks.items():
                (root / rel).write_text(text)
            jobs.append({"dir": str(root), "modules": [rel[:-3] for rel in checks]})
        proc = subprocess.run(
            [sys.executable, "-c", _DRIVER],
            input=json.dumps(jobs),
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])


def run_check_program(task: Task, overrides: dict[str, str], *, timeout: float = 60) -> tuple[int, str]:
    """Run an ops task's hidden check the way the check_program verifier does (program on stdin, python -I,
    cwd = the workspace), on the task's files with `overrides` applied. Returns (exit code, output tail)."""
    runner = "import sys; exec(compile(sys.stdin.read(), '<check>', 'exec'), {'__name__': '__main__'})"
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in {**task.files, **overrides}.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (program,) = task.hidden_checks.values()
        proc = subprocess.run(
            [sys.executable, "-I", "-c", runner],
            input=program,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return proc.returncode, (proc.stdout + proc.stderr).strip()[-400:]
