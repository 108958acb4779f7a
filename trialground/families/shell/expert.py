"""The `shell` family's scripted expert: reads the question and writes its own pipeline (grep, sort and
awk where the reference uses others), never the reference."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_RULES: tuple[tuple[str, str], ...] = (
    (r"how many requests got status (\d+)", "awk '$4 == {0} {{n++}} END {{print n + 0}}' \"$1\""),
    (
        r"total bytes sent for (\w+) requests",
        "grep -E '^[^ ]+ {0} ' \"$1\" | awk '{{s += $5}} END {{print s + 0}}'",
    ),
    (
        r"the (\d+) most requested paths",
        "awk '{{c[$3]++}} END {{for (p in c) print c[p], p}}' \"$1\" | sort -k1,1nr -k2,2 | head -n {0}",
    ),
    (r"distinct client address that got status (\d+)", "awk '$4 == {0} {{print $1}}' \"$1\" | sort | uniq"),
    (
        r"at least one server error",
        "awk '$4 >= 500 {{c[$3]++}} END {{for (p in c) print p, c[p]}}' \"$1\" | sort -k1,1",
    ),
    (
        r"path of the request that sent the most bytes",
        "awk '$5 > m || !seen {{m = $5; p = $3; seen = 1}} END {{print p}}' \"$1\"",
    ),
)


def solve(task: Task) -> str | None:
    """The expert's solve.sh for `task`, or None when it does not recognise the question."""
    for pattern, script in _RULES:
        m = re.search(pattern, task.prompt)
        if m:
            return "#!/bin/bash\n" + script.format(*m.groups()) + "\n"
    return None
