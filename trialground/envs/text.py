"""Text helpers shared by environments: budgeted observations and code extraction from completions."""

from __future__ import annotations

import re

_FENCE_RE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_LANGS = {"python", "py", "python3"}


def truncate_middle(text: str, budget: int) -> str:
    """`text` if it fits in `budget` chars, else its head and tail around a marker naming the dropped count.

    The result is at most `budget` chars long whenever `budget` leaves room for the marker (>= 64);
    the head gets a little more than the tail because errors and prompts tend to start there.
    """
    if len(text) <= budget:
        return text
    # The marker length depends on the dropped count; two passes settle it.
    keep = budget
    for _ in range(2):
        dropped = len(text) - keep
        marker = f"\n[... {dropped} chars dropped ...]\n"
        keep = max(0, budget - len(marker))
    dropped = len(text) - keep
    marker = f"\n[... {dropped} chars dropped ...]\n"
    head = (keep + 1) // 2 + keep // 10
    head = min(head, keep)
    tail = keep - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def extract_code(completion: str) -> str:
    """The program in a completion.

    Rules, in order: the last fenced block tagged python/py/python3; else the last fenced block of any
    language; else the whole completion. An unterminated final fence (generation stopped) counts as a
    block running to the end. Leading/trailing blank lines are stripped; a trailing newline is added.
    """
    blocks = [(m.group(1).strip().lower(), m.group(2)) for m in _FENCE_RE.finditer(completion)]
    python_blocks = [body for lang, body in blocks if lang in _PY_LANGS]
    if python_blocks:
        code = python_blocks[-1]
    elif blocks:
        code = blocks[-1][1]
    else:
        code = completion
    code = code.strip("\n")
    return code + "\n" if code.strip() else ""
