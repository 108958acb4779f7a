"""Hidden check of a files-in, files-out task: runs after the episode, cwd = the workspace; exit 0 = solved.

Shared by the families whose answer is a program that turns input files into output (see
`trialground.families.filetask`). The agent's solution file (a regular file, read once and bounded) is
copied into a fresh directory of its own for each case, with that case's input files (the workspace's,
and hidden ones of the same kind the agent never saw), and run there as `python3 -I SOLUTION ARGS...`
under the C locale with a timeout; its output (a file it writes, or its standard output) is parsed here
and compared with what the generator computed. Where the spec runs nothing, the solution file itself is
the output (a repaired configuration file). This process is made undumpable first, the program's exit
status is ignored, and the expected values never exist outside this process. Standard library only.
"""

import configparser
import csv
import io
import json
import os
import sys
import tomllib
from collections.abc import Callable

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import (
        Failed,
        finish,
        read_regular,
        run_there,
        scratch,
        submission,
    )

SPEC_JSON = "{}"  # replaced by the task generator
MAX_SOLUTION = 100_000
MAX_OUTPUT = 1 << 20


def rounded(value: object) -> object:
    """Plain data with floats rounded to 6 decimals (bool and int kept apart from float)."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    return value


def ini(text: str) -> object:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.read_string(text)
    return {name: dict(parser.items(name, raw=True)) for name in parser.sections()}


def lines(text: str) -> object:
    return [line.rstrip() for line in text.rstrip("\n").split("\n")] if text.strip() else []


def rows(text: str) -> object:
    return [row for row in csv.reader(io.StringIO(text)) if row]


PARSE: dict[str, Callable[[str], object]] = {
    "json": json.loads,
    "toml": tomllib.loads,
    "ini": ini,
    "text": lines,
    "csv": rows,
}


def produce(spec: dict, script: str, case: dict) -> str:
    """The program's output for one case (its stdout, or the file it writes); Failed when it produced
    none."""
    name = os.path.basename(spec["solution"])
    with scratch("tg-files-", {name: script, **case["files"]}) as home:
        run = run_there([sys.executable, "-I", name, *case["args"]], home, spec["timeout_s"])
        if run is None:
            raise Failed(f"{case['label']}: {name} ran past {spec['timeout_s']} s")
        if case["output"] == "-":
            if len(run.stdout) > MAX_OUTPUT:
                raise Failed(f"{case['label']}: more than {MAX_OUTPUT} bytes on stdout")
            return run.stdout.decode("utf-8", "replace")
        try:
            return read_regular(os.path.join(home, case["output"]), MAX_OUTPUT)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise Failed(f"{case['label']}: no {case['output']}: {e}") from None


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec, script = submission(SPEC_JSON, MAX_SOLUTION)
    for case in spec["cases"]:
        text = produce(spec, script, case) if spec["run"] else script
        try:
            got = rounded(PARSE[case["compare"]](text))
        except (ValueError, TypeError, RecursionError, configparser.Error, csv.Error) as e:
            return f"{case['label']}: not valid {case['compare']}: {type(e).__name__}: {e}"[:400]
        if got != rounded(case["want"]):
            return f"{case['label']}: wrong output (first 120 characters: {text[:120]!r})"
    return None


if __name__ == "__main__":
    finish(main)
