"""Hidden check of a trialground scicomp task: runs after the episode, cwd = the workspace; exit 0 = solved.

The submission's `f` runs in a child interpreter with site-packages (numpy, scipy) but not the workspace on
its path (`-I`): it receives the hidden inputs as JSON on stdin and answers one JSON list on its last line
of stdout. Nothing it does reaches this process: this process is made undumpable first (the child cannot
read its memory through /proc), the child's exit status is ignored, and every answer is checked here, in
plain floats, against values or invariants computed by the generator (never by the submission).
Standard library only.
"""

import json
import math
import subprocess
import sys

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, undumpable

SPEC_JSON = "{}"  # replaced by the task generator
MAX_OUTPUT = 1 << 20

RUNNER = r"""
import importlib.util, json, os, sys
cases = json.loads(sys.stdin.read())
real = os.dup(1)
os.dup2(2, 1)  # anything the solution prints goes to stderr
spec = importlib.util.spec_from_file_location("solution", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = []
for args in cases:
    try:
        value = module.f(*args)
        out.append(float(value) if isinstance(value, float) else None)
    except Exception:
        out.append(None)
os.write(real, ("\n" + json.dumps(out) + "\n").encode())
"""


def close(got: float, want: float, rel: float, abs_tol: float) -> bool:
    return abs(got - want) <= abs_tol + rel * abs(want)


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec = json.loads(SPEC_JSON)
    undumpable()
    cases = [c["args"] for c in spec["cases"]]
    try:
        run = subprocess.run(
            [sys.executable, "-I", "-c", RUNNER, spec["solution"]],
            input=json.dumps(cases).encode(),
            capture_output=True,
            timeout=spec["timeout_s"],
        )
    except subprocess.TimeoutExpired:
        return f"the solution did not answer within {spec['timeout_s']} s"
    lines = run.stdout[-MAX_OUTPUT:].decode("utf-8", "replace").strip().splitlines()
    try:
        answers = json.loads(lines[-1]) if lines else None
    except ValueError:
        answers = None
    if not isinstance(answers, list) or len(answers) != len(cases):
        return f"no answers from the solution: {run.stderr[-300:].decode('utf-8', 'replace')}"
    for case, got in zip(spec["cases"], answers, strict=True):
        if type(got) is not float or not math.isfinite(got):
            return f"f{tuple(case['args'])} returned {got!r}, not a finite float"
        if spec["invariant"]:
            ok = eval(spec["invariant"], {"abs": abs, "max": max}, {"got": got, "args": case["args"]})
        else:
            ok = close(got, case["want"], spec["rel_tol"], spec["abs_tol"])
        if ok is not True:
            return f"f{tuple(case['args'])} = {got!r} is wrong"
    return None


if __name__ == "__main__":
    finish(main)
