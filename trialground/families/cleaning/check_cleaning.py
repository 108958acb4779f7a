"""Hidden check of a trialground cleaning task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `clean.py` (a regular file, read once and bounded) is copied into a fresh directory of its own
with a copy of each raw file this check holds (the workspace's `raw.csv`, and a hidden one of the same
kind the agent never saw), run there as `python3 -I clean.py raw.csv clean.csv` with a timeout, and the
CSV it writes must hold exactly the rows the generator computed for that input. This process is made
undumpable first; the script's exit status and output are ignored. Standard library only.
"""

import contextlib
import csv
import ctypes
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

SPEC_JSON = "{}"  # replaced by the task generator
PR_SET_DUMPABLE = 4
MAX_SCRIPT = 50_000
MAX_OUTPUT = 1 << 20


def undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def read_regular(path: str, limit: int) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise ValueError(f"{os.path.basename(path)} is not a regular file of at most {limit} bytes")
        return os.read(fd, limit + 1).decode("utf-8")
    finally:
        os.close(fd)


def run(script: str, raw: str, timeout: float) -> list[list[str]] | str:
    home = tempfile.mkdtemp(prefix="tg-clean-")
    try:
        with open(os.path.join(home, "clean.py"), "w", encoding="utf-8") as f:
            f.write(script)
        with open(os.path.join(home, "raw.csv"), "w", encoding="utf-8") as f:
            f.write(raw)
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": home}
        try:
            subprocess.run([sys.executable, "-I", "clean.py", "raw.csv", "clean.csv"], cwd=home, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return f"clean.py ran past {timeout} s"
        try:
            text = read_regular(os.path.join(home, "clean.csv"), MAX_OUTPUT)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            return f"no clean.csv: {e}"
        return [row for row in csv.reader(io.StringIO(text)) if row]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    spec = json.loads(SPEC_JSON)
    undumpable()
    try:
        script = read_regular(spec["solution"], MAX_SCRIPT)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        print(f"cannot read the script: {e}")
        return 1
    for label, raw, want in (("workspace raw.csv", spec["raw"], spec["want"]),
                             ("hidden raw.csv", spec["hidden_raw"], spec["hidden_want"])):  # fmt: skip
        got = run(script, raw, spec["timeout_s"])
        if isinstance(got, str):
            print(f"{label}: {got}")
            return 1
        if got != want:
            pairs = enumerate(zip(got, want, strict=False))
            first = next((i for i, (a, b) in pairs if a != b), min(len(got), len(want)))
            print(f"{label}: {len(got)} rows written, {len(want)} expected; first difference at row {first}")
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
