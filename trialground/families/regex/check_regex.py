"""Hidden check of a trialground regex task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `pattern.txt` (a regular file, read once and bounded; one trailing newline dropped) is compiled
and applied with Python's `re.finditer` to a copy of the workspace's text and to a hidden text of the same
kind, in a child interpreter (isolated mode, no site) under a timeout so a pattern with catastrophic
backtracking only fails; the child receives the pattern and texts on standard input and answers with JSON.
Each text's list of whole matches, in order, must equal the items the generator planted. This process is
made undumpable first. Standard library only.
"""

import json
import subprocess
import sys

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, read_regular, undumpable

SPEC_JSON = "{}"  # replaced by the task generator
MAX_PATTERN = 4000
CHILD = """
import json, re, sys
job = json.load(sys.stdin)
rx = re.compile(job["pattern"])
print(json.dumps([[m.group(0) for m in rx.finditer(text)] for text in job["texts"]]))
"""


def read_pattern(path: str) -> str:
    text = read_regular(path, MAX_PATTERN)
    return text[:-1] if text.endswith("\n") else text


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec = json.loads(SPEC_JSON)
    undumpable()
    try:
        pattern = read_pattern(spec["solution"])
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return f"cannot read the pattern: {e}"
    if not pattern.strip():
        return "the pattern is empty"
    job = json.dumps({"pattern": pattern, "texts": [spec["text"], spec["hidden_text"]]})
    try:
        argv, env = [sys.executable, "-I", "-S", "-c", CHILD], {"PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            argv, input=job.encode("utf-8"), capture_output=True, timeout=spec["timeout_s"], env=env
        )
    except subprocess.TimeoutExpired:
        return f"matching ran past {spec['timeout_s']} s"
    try:
        found = json.loads(done.stdout.decode("utf-8"))
    except ValueError:
        return f"the pattern does not compile: {done.stderr.decode('utf-8', 'replace')[-300:]}"
    for label, got, want in zip(
        ("workspace text", "hidden text"), found, (spec["want"], spec["hidden_want"]), strict=True
    ):
        if got != want:
            return f"{label}: matches {got[:4]!r}... differ from the expected {want[:4]!r}..."
    return None


if __name__ == "__main__":
    finish(main)
