"""The `codegen` family's scripted expert: decodes the prompt's steps back into the shared step vocabulary
(`families/programs.py`) and writes one code line per step. It reads the prompt only, never the reference
or the hidden tests; a prompt it cannot decode step by step gets None."""

from __future__ import annotations

import re

from trialground.families.programs import INT_OPS, LIST_OPS, LIST_REDUCERS, Op
from trialground.tasks.model import Task

_HEAD = re.compile(r"Write f\((xs?)\) for (?:an integer x|a list of integers xs): (.*)\.\Z", re.S)


def _phrase(op: Op, phrase: str) -> re.Pattern[str]:
    return re.compile(re.escape(phrase).replace(re.escape("{c}"), r"(-?\d+)") + r"\Z")


def _line(ops: tuple[Op, ...], words: str) -> str | None:
    """The code line of the one op whose phrase states `words` exactly, or None."""
    for op in ops:
        for phrase in op.phrases:
            m = _phrase(op, phrase).match(words)
            if m:
                return op.code.format(c=m.group(1) if m.groups() else None)
    return None


def solve(task: Task) -> str | None:
    """The expert's solution.py for `task`, or None when a step is not one it knows."""
    head = _HEAD.match(task.prompt.strip())
    if head is None:
        return None
    var, steps = head.group(1), head.group(2).split(", then ")
    reducer = None
    if var == "xs":
        reducer = _line(LIST_REDUCERS, steps.pop()) if steps else None
        if reducer is None:
            return None
    lines = [_line(INT_OPS if var == "x" else LIST_OPS, words) for words in steps]
    if not lines or any(line is None for line in lines):
        return None
    body = "".join(f"    {line}\n" for line in lines)
    return f"def f({var}):\n{body}    {reducer or 'return x'}\n"
