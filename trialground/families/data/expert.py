"""The `data` family's scripted expert: reads which statistic the question asks of which columns, computes
it from the workspace's CSV with its own code, and ends its reply with `Answer: <value>`. It never reads
the reference or `metadata["reference_program"]`; a question it does not recognise gets None."""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Callable

from trialground.tasks.model import Task

Rows = list[dict[str, str]]
_FILE = re.compile(r"The file (\S+) in your workspace")
_V = r"'([^']*)'"  # a quoted value, as the question writes it (repr of a plain word)


def _where(rows: Rows, col: str, value: str) -> Rows:
    return [r for r in rows if r[col] == value]


def _col(rows: Rows, col: str) -> list[float]:
    return [float(r[col]) for r in rows]


def _by(rows: Rows, cat: str, num: str) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r[cat], []).append(float(r[num]))
    return groups


def _two(x: float) -> str:
    return f"{x:.2f}"


# (question pattern, what the answer is from the rows and the pattern's groups)
_QUESTIONS: tuple[tuple[re.Pattern[str], Callable[[Rows, tuple[str, ...]], str]], ...] = (
    (
        re.compile(rf"What is the average (\w+) over the rows whose (\w+) is {_V}\?"),
        lambda rows, g: _two(statistics.fmean(_col(_where(rows, g[1], g[2]), g[0]))),
    ),
    (
        re.compile(
            rf"What is the total (\w+) over the rows whose (\w+) is {_V} and whose (\w+) is greater than "
            r"([-\d.e+]+)\?"
        ),
        lambda rows, g: _two(
            sum(float(r[g[0]]) for r in _where(rows, g[1], g[2]) if float(r[g[3]]) > float(g[4]))
        ),
    ),
    (
        re.compile(r"Which (\w+) has the largest total (\w+)\?"),
        lambda rows, g: max(_by(rows, g[0], g[1]).items(), key=lambda kv: sum(kv[1]))[0],
    ),
    (
        re.compile(r"Which (\w+) has the lowest average (\w+)\?"),
        lambda rows, g: min(_by(rows, g[0], g[1]).items(), key=lambda kv: statistics.fmean(kv[1]))[0],
    ),
    (
        re.compile(
            r"How many distinct values of (\w+) appear among the rows whose (\w+) "
            r"is at least ([-\d.e+]+)\?"
        ),
        lambda rows, g: str(len({r[g[0]] for r in rows if float(r[g[1]]) >= float(g[2])})),
    ),
    (
        re.compile(rf"How many rows have (\w+) {_V} and (\w+) {_V}\?"),
        lambda rows, g: str(len([r for r in _where(rows, g[0], g[1]) if r[g[2]] == g[3]])),
    ),
    (
        re.compile(rf"What is the median (\w+) over the rows whose (\w+) is {_V}\?"),
        lambda rows, g: _two(statistics.median(_col(_where(rows, g[1], g[2]), g[0]))),
    ),
    (
        re.compile(rf"difference between the largest and smallest (\w+) among rows whose (\w+) is {_V}\?"),
        lambda rows, g: _two(max(v := _col(_where(rows, g[1], g[2]), g[0])) - min(v)),
    ),
)


def solve(task: Task) -> str | None:
    """The expert's reply for `task`, or None when it does not recognise the question or the file."""
    found = _FILE.search(task.prompt)
    name = found.group(1) if found else ""
    text = task.files.get(name)
    if not isinstance(text, str):
        return None
    rows = list(csv.DictReader(io.StringIO(text)))
    for pattern, answer in _QUESTIONS:
        m = pattern.search(task.prompt)
        if m:
            try:
                return f"I computed it from {name}.\nAnswer: {answer(rows, m.groups())}"
            except (KeyError, ValueError, statistics.StatisticsError):
                return None
    return None
