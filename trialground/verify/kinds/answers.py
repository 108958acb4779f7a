"""Answer verifiers: `exact` (normalised), `regex` and `numeric` (tolerance).

The answer is extracted from the completion (`extract_answer`), in this order:
1. the content of the LAST `\\boxed{...}` (braces balanced);
2. else the text after the LAST line starting with `Answer:` (case-insensitive; `Final answer:` too);
3. else the whole completion, stripped.
`params["extract"] = "whole"` skips 1-2. Never partial credit: the verdict is pass or fail.

Params: exact: `answer` (str or list of accepted strings), `case_sensitive` (default False);
regex: `pattern` (full match against the extracted answer), `flags` ("i", "s", "m");
numeric: `answer` (number), `rel_tol` (default 1e-6), `abs_tol` (default 1e-9).
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from trialground.errors import VerifierError
from trialground.tasks.model import Task
from trialground.verify.verdict import Verdict

_ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:：]\s*(.*)$", re.IGNORECASE | re.MULTILINE)


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}`, with nested braces, or None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1].strip() if depth == 0 else None


def extract_answer(completion: str, mode: str = "auto") -> str:
    if mode == "whole":
        return completion.strip()
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    lines = _ANSWER_LINE.findall(completion)
    if lines:
        return lines[-1].strip()
    return completion.strip()


def normalise(text: str, *, case_sensitive: bool = False) -> str:
    """NFKC, collapsed whitespace, no surrounding quotes/`$`/trailing period; lower-cased unless asked."""
    t = unicodedata.normalize("NFKC", text).strip()
    t = re.sub(r"\s+", " ", t)
    t = t.strip().strip("$").strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'`":
        t = t[1:-1].strip()
    t = t.rstrip(".").strip()
    return t if case_sensitive else t.casefold()


def parse_number(text: str) -> float | None:
    """A number from `text`: ints, floats, `1,234`, `3/4`, percentages as written (no scaling)."""
    t = normalise(text).replace(",", "").rstrip("%").strip()
    t = t.removeprefix("\\(").removesuffix("\\)")
    m = re.fullmatch(r"([-+]?\d+)\s*/\s*(\d+)", t)
    if m:
        den = int(m.group(2))
        return int(m.group(1)) / den if den else None
    try:
        value = float(t)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _param(task: Task, name: str) -> Any:
    if name not in task.verifier.params:
        raise VerifierError(
            f"task {task.id}: {task.verifier.kind} verifier needs params[{name!r}]", kind="bad_task"
        )
    return task.verifier.params[name]


def verify_exact(task: Task, submission: str) -> Verdict:
    cs = bool(task.verifier.params.get("case_sensitive", False))
    gold = _param(task, "answer")
    accepted = {normalise(str(g), case_sensitive=cs) for g in (gold if isinstance(gold, list) else [gold])}
    got = normalise(
        extract_answer(submission, task.verifier.params.get("extract", "auto")), case_sensitive=cs
    )
    ok = got in accepted
    return Verdict(passed=ok, score=float(ok), detail=f"answer {got[:80]!r}: {'match' if ok else 'no match'}")


def verify_regex(task: Task, submission: str) -> Verdict:
    flags = 0
    for ch in str(task.verifier.params.get("flags", "")):
        flags |= {"i": re.IGNORECASE, "s": re.DOTALL, "m": re.MULTILINE}.get(ch, 0)
    try:
        pattern = re.compile(str(_param(task, "pattern")), flags)
    except re.error as e:
        raise VerifierError(f"task {task.id}: bad regex: {e}", kind="bad_task") from e
    got = extract_answer(submission, task.verifier.params.get("extract", "auto"))
    ok = pattern.fullmatch(got) is not None
    return Verdict(
        passed=ok, score=float(ok), detail=f"answer {got[:80]!r} {'matches' if ok else 'does not match'}"
    )


def verify_numeric(task: Task, submission: str) -> Verdict:
    gold = parse_number(str(_param(task, "answer")))
    if gold is None:
        raise VerifierError(f"task {task.id}: gold answer is not a number", kind="bad_task")
    rel = float(task.verifier.params.get("rel_tol", 1e-6))
    abs_tol = float(task.verifier.params.get("abs_tol", 1e-9))
    got_text = extract_answer(submission, task.verifier.params.get("extract", "auto"))
    got = parse_number(got_text)
    ok = got is not None and math.isclose(got, gold, rel_tol=rel, abs_tol=abs_tol)
    return Verdict(passed=ok, score=float(ok), detail=f"answer {got_text[:60]!r} vs {gold:g}")
