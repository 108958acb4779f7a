"""Hidden check of a trialground shell task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `solve.sh` (a regular file, read once and bounded) is copied into a fresh directory of its own
with a copy of each input log this check holds (the workspace's, and a hidden one the agent never saw), run
there as `bash solve.sh access.log` under the C locale and a timeout, and its standard output must equal,
line for line (trailing blanks ignored), what the generator computed for that log. This process is made
undumpable first; the script's exit status and standard error are ignored. Standard library only.
"""

import contextlib
import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

SPEC_JSON = "{}"  # replaced by the task generator
PR_SET_DUMPABLE = 4
MAX_SCRIPT = 20_000
MAX_OUTPUT = 1 << 20


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


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def run(script: str, log: str, timeout: float) -> str | None:
    home = tempfile.mkdtemp(prefix="tg-shell-")
    try:
        with open(os.path.join(home, "solve.sh"), "w", encoding="utf-8") as f:
            f.write(script)
        with open(os.path.join(home, "access.log"), "w", encoding="utf-8") as f:
            f.write(log)
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": home}
        try:
            done = subprocess.run(["bash", "solve.sh", "access.log"], cwd=home, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return None
        return done.stdout[:MAX_OUTPUT].decode("utf-8", "replace")
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
    for label, log, want in (("workspace log", spec["log"], spec["want"]),
                             ("hidden log", spec["hidden_log"], spec["hidden_want"])):  # fmt: skip
        got = run(script, log, spec["timeout_s"])
        if got is None:
            print(f"{label}: solve.sh ran past {spec['timeout_s']} s")
            return 1
        if lines(got) != lines(want):
            print(f"{label}: output {lines(got)[:3]!r}... differs from the expected {lines(want)[:3]!r}...")
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
