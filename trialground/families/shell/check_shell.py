"""Hidden check of a trialground shell task: runs after the episode, cwd = the workspace; exit 0 = solved.

The agent's `solve.sh` (a regular file, read once and bounded) is copied into a fresh directory of its own
with a copy of each input log this check holds (the workspace's, and a hidden one the agent never saw), run
there as `bash solve.sh access.log` under the C locale and a timeout, and its standard output must equal,
line for line (trailing blanks ignored), what the generator computed for that log. This process is made
undumpable first; the script's exit status and standard error are ignored. Standard library only.
"""

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, run_there, scratch, submission

SPEC_JSON = "{}"  # replaced by the task generator
MAX_SCRIPT = 20_000
MAX_OUTPUT = 1 << 20


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def run(script: str, log: str, timeout: float) -> str | None:
    with scratch("tg-shell-", {"solve.sh": script, "access.log": log}) as home:
        done = run_there(["bash", "solve.sh", "access.log"], home, timeout)
        return None if done is None else done.stdout[:MAX_OUTPUT].decode("utf-8", "replace")


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec, script = submission(SPEC_JSON, MAX_SCRIPT)
    for label, log, want in (("workspace log", spec["log"], spec["want"]),
                             ("hidden log", spec["hidden_log"], spec["hidden_want"])):  # fmt: skip
        got = run(script, log, spec["timeout_s"])
        if got is None:
            return f"{label}: solve.sh ran past {spec['timeout_s']} s"
        if lines(got) != lines(want):
            return f"{label}: output {lines(got)[:3]!r}... differs from the expected {lines(want)[:3]!r}..."
    return None


if __name__ == "__main__":
    finish(main)
