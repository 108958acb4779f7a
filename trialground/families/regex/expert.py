"""The `regex` family's scripted expert: reads the kind of item from the prompt and writes its own pattern
(other alternations, character classes and group shapes than the reference), never the reference."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_BYTE = "(?:[0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])"
_N = "(?:[1-9][0-9]*|0)"
_RULES: tuple[tuple[str, str], ...] = (
    (r"the IPv4 addresses", f"(?<![0-9.])(?:{_BYTE}\\.){{3}}{_BYTE}(?![0-9.])"),
    (r"the ISO dates", "(?<![0-9-])[0-9]{4}-(?:1[0-2]|0[1-9])-(?:3[01]|[12][0-9]|0[1-9])(?![0-9-])"),
    (
        r"the e-mail addresses at exactly the domain (\S+):",
        "(?<![A-Za-z0-9_.+-])[A-Za-z0-9_.+-]+@{0}(?![A-Za-z0-9_.-])",
    ),
    (r"the CSS hex colours", "#[0-9A-Fa-f]{3}(?:[0-9A-Fa-f]{3})?(?![A-Za-z0-9])"),
    (r"the 24-hour times", "(?<![0-9:])(?:2[0-3]|[01][0-9])(?::[0-5][0-9]){1,2}(?![0-9:])"),
    (r"the version tags", f"(?<![0-9A-Za-z])v{_N}(?:\\.{_N}){{2}}(?![0-9A-Za-z.])"),
)


def solve(task: Task) -> str | None:
    """The expert's pattern.txt for `task`, or None when it does not recognise the kind of item."""
    for pattern, answer in _RULES:
        m = re.search(pattern, task.prompt)
        if m:
            return answer.replace("{0}", re.escape(m.group(1))) + "\n" if m.groups() else answer + "\n"
    return None
