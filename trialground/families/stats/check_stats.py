"""Hidden check of a trialground stats task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `analysis.py` (a regular file, read once and bounded) is copied into a fresh directory of its
own with a copy of each data file this check holds (the workspace's `data.csv`, and a hidden one of the
same design the agent never saw), run there as `python3 -I analysis.py data.csv` with a timeout, and the
last non-empty line of its standard output must be a finite number within a relative 1e-6 (absolute 1e-9)
of the value the generator computed for that file. This process is made undumpable first; the script's
exit status and standard error are ignored. Standard library only.
"""

import contextlib
import ctypes
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile

SPEC_JSON = "{}"  # replaced by the task generator
PR_SET_DUMPABLE = 4
MAX_SCRIPT = 50_000
MAX_OUTPUT = 1 << 16


def undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def read_script(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SCRIPT:
            raise ValueError(f"{path} is not a regular file of at most {MAX_SCRIPT} bytes")
        return os.read(fd, MAX_SCRIPT + 1).decode("utf-8")
    finally:
        os.close(fd)


def run(script: str, data: str, timeout: float) -> float | str:
    home = tempfile.mkdtemp(prefix="tg-stats-")
    try:
        with open(os.path.join(home, "analysis.py"), "w", encoding="utf-8") as f:
            f.write(script)
        with open(os.path.join(home, "data.csv"), "w", encoding="utf-8") as f:
            f.write(data)
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": home}
        argv = [sys.executable, "-I", "analysis.py", "data.csv"]
        try:
            done = subprocess.run(argv, cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
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
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    spec = json.loads(SPEC_JSON)
    undumpable()
    try:
        script = read_script(spec["solution"])
    except (OSError, ValueError, UnicodeDecodeError) as e:
        print(f"cannot read the script: {e}")
        return 1
    cases = (("workspace data.csv", spec["data"], spec["want"]),
             ("hidden data.csv", spec["hidden_data"], spec["hidden_want"]))  # fmt: skip
    for label, data, want in cases:
        got = run(script, data, spec["timeout_s"])
        if isinstance(got, str):
            print(f"{label}: {got}")
            return 1
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            print(f"{label}: printed {got!r}, not within 1e-6 of the expected value")
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
