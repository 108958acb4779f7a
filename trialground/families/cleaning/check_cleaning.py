"""Hidden check of a trialground cleaning task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `clean.py` (a regular file, read once and bounded) is copied into a fresh directory of its own
with a copy of each raw file this check holds (the workspace's `raw.csv`, and a hidden one of the same
kind the agent never saw), run there as `python3 -I clean.py raw.csv clean.csv` with a timeout, and the
CSV it writes must hold exactly the rows the generator computed for that input. This process is made
undumpable first; the script's exit status and output are ignored. Standard library only.
"""

import csv
import io
import os
import sys

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, read_regular, run_there, scratch, submission

SPEC_JSON = "{}"  # replaced by the task generator
MAX_SCRIPT = 50_000
MAX_OUTPUT = 1 << 20


def run(script: str, raw: str, timeout: float) -> list[list[str]] | str:
    with scratch("tg-clean-", {"clean.py": script, "raw.csv": raw}) as home:
        if run_there([sys.executable, "-I", "clean.py", "raw.csv", "clean.csv"], home, timeout) is None:
            return f"clean.py ran past {timeout} s"
        try:
            text = read_regular(os.path.join(home, "clean.csv"), MAX_OUTPUT)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            return f"no clean.csv: {e}"
    return [row for row in csv.reader(io.StringIO(text)) if row]


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec, script = submission(SPEC_JSON, MAX_SCRIPT)
    for label, raw, want in (("workspace raw.csv", spec["raw"], spec["want"]),
                             ("hidden raw.csv", spec["hidden_raw"], spec["hidden_want"])):  # fmt: skip
        got = run(script, raw, spec["timeout_s"])
        if isinstance(got, str):
            return f"{label}: {got}"
        if got != want:
            pairs = enumerate(zip(got, want, strict=False))
            first = next((i for i, (a, b) in pairs if a != b), min(len(got), len(want)))
            return f"{label}: {len(got)} rows written, {len(want)} expected; first difference at row {first}"
    return None


if __name__ == "__main__":
    finish(main)
