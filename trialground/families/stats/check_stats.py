"""Hidden check of a trialground stats task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `analysis.py` (a regular file, read once and bounded) is copied into a fresh directory of its
own with a copy of each data file this check holds (the workspace's `data.csv`, and a hidden one of the
same design the agent never saw), run there as `python3 -I analysis.py data.csv` with a timeout, and the
last non-empty line of its standard output must be a finite number within a relative 1e-6 (absolute 1e-9)
of the value the generator computed for that file. This process is made undumpable first; the script's
exit status and standard error are ignored. Standard library only.
"""

import math
import sys

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, run_there, scratch, submission

SPEC_JSON = "{}"  # replaced by the task generator
MAX_SCRIPT = 50_000
MAX_OUTPUT = 1 << 16


def run(script: str, data: str, timeout: float) -> float | str:
    with scratch("tg-stats-", {"analysis.py": script, "data.csv": data}) as home:
        done = run_there([sys.executable, "-I", "analysis.py", "data.csv"], home, timeout)
    if done is None:
        return f"analysis.py ran past {timeout} s"
    printed = [line.strip() for line in done.stdout[:MAX_OUTPUT].decode("utf-8", "replace").splitlines()]
    printed = [line for line in printed if line]
    if not printed:
        return "analysis.py printed nothing"
    try:
        value = float(printed[-1])
    except ValueError:
        return f"the last line {printed[-1][:80]!r} is not a number"
    return value if math.isfinite(value) else f"{printed[-1][:80]!r} is not finite"


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec, script = submission(SPEC_JSON, MAX_SCRIPT)
    cases = (("workspace data.csv", spec["data"], spec["want"]),
             ("hidden data.csv", spec["hidden_data"], spec["hidden_want"]))  # fmt: skip
    for label, data, want in cases:
        got = run(script, data, spec["timeout_s"])
        if isinstance(got, str):
            return f"{label}: {got}"
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            return f"{label}: printed {got!r}, not within 1e-6 of the expected value"
    return None


if __name__ == "__main__":
    finish(main)
