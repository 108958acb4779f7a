"""Hidden check of a trialground regex task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `pattern.txt` (a regular file, read once and bounded; one trailing newline dropped) is compiled
and applied with Python's `re.finditer` to a copy of the workspace's text and to a hidden text of the same
kind, in a child interpreter (isolated mode, no site) under a timeout so a pattern with catastrophic
backtracking only fails; the child receives the pattern and texts on standard input and answers with JSON.
Each text's list of whole matches, in order, must equal the items the generator planted. This process is
made undumpable first. Standard library only.
"""

import contextlib
import ctypes
import json
import os
import stat
import subprocess
import sys

SPEC_JSON = "{}"  # replaced by the task generator
PR_SET_DUMPABLE = 4
MAX_PATTERN = 4000
CHILD = """
import json, re, sys
job = json.load(sys.stdin)
rx = re.compile(job["pattern"])
print(json.dumps([[m.group(0) for m in rx.finditer(text)] for text in job["texts"]]))
"""


def undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def read_pattern(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PATTERN:
            raise ValueError(f"{path} is not a regular file of at most {MAX_PATTERN} bytes")
        text = os.read(fd, MAX_PATTERN + 1).decode("utf-8")
    finally:
        os.close(fd)
    return text[:-1] if text.endswith("\n") else text


def main() -> int:
    spec = json.loads(SPEC_JSON)
    undumpable()
    try:
        pattern = read_pattern(spec["solution"])
    except (OSError, ValueError, UnicodeDecodeError) as e:
        print(f"cannot read the pattern: {e}")
        return 1
    if not pattern.strip():
        print("the pattern is empty")
        return 1
    job = json.dumps({"pattern": pattern, "texts": [spec["text"], spec["hidden_text"]]})
    try:
        argv, env = [sys.executable, "-I", "-S", "-c", CHILD], {"PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            argv, input=job.encode("utf-8"), capture_output=True, timeout=spec["timeout_s"], env=env
        )
    except subprocess.TimeoutExpired:
        print(f"matching ran past {spec['timeout_s']} s")
        return 1
    try:
        found = json.loads(done.stdout.decode("utf-8"))
    except ValueError:
        print(f"the pattern does not compile: {done.stderr.decode('utf-8', 'replace')[-300:]}")
        return 1
    for label, got, want in zip(
        ("workspace text", "hidden text"), found, (spec["want"], spec["hidden_want"]), strict=True
    ):
        if got != want:
            print(f"{label}: matches {got[:4]!r}... differ from the expected {want[:4]!r}...")
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
