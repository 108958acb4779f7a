"""Answer verifiers: `exact` (normalised), `regex` and `numeric` (tolerance).

The answer is extracted from the completion (`extract_answer`), in this order:
1. the content of the LAST `\\boxed{...}` (braces balanced);
2. else the text after the LAST line starting with `Answer:` (case-insensitive; `Final answer:` too);
3. else the whole completion, stripped.
`extract: whole` skips 1-2. Never partial credit: the verdict is pass or fail.

Params (typed, with their defaults, in `trialground.tasks.verifiers`): exact `AnswerParams` (`answer`, a
string or a list of accepted ones; `case_sensitive`), regex `RegexParams` (`pattern`, a full match against
the extracted answer; `flags`, any of "i", "s", "m"), numeric `NumericParams` (`answer`; `rel_tol`,
`abs_tol`). Each function takes the kind's validated params, by default the task's own.

The submission controls the text these run on, on the host, so every step is linear in its length:
`regex` patterns run on RE2 (no backtracking; RE2 syntax, so no back-references or look-around; its
memory is bounded by `_RE2_MAX_MEM`), answer extraction has no pattern that backtracks across lines, and
a number that cannot be represented (a 5,000-digit fraction, an overflowing quotient) is simply not a
number: a failed verdict, never an infrastructure error.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

import re2

from trialground.errors import VerifierError
from trialground.tasks.model import Task
from trialground.tasks.verifiers import AnswerParams, NumericParams, RegexParams
from trialground.verify.verdict import Verdict

# Horizontal whitespace only before `answer`: a `\s*` there spans newlines, and is quadratic in them.
_ANSWER_LINE = re.compile(
    r"^[^\S\r\n]*(?:final[^\S\r\n]+)?answer[^\S\r\n]*[:：]\s*(.*)$", re.IGNORECASE | re.MULTILINE
)
_RE2_MAX_MEM = 32 << 20


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
    try:
        if m:
            den = int(m.group(2))
            return int(m.group(1)) / den if den else None
        value = float(t)
    except (ValueError, OverflowError):  # over int's digit limit, or a quotient beyond a float
        return None
    return value if math.isfinite(value) else None


def verify_exact(task: Task, submission: str, params: AnswerParams | None = None) -> Verdict:
    p = params or task.verifier.params_as(AnswerParams)
    cs = p.case_sensitive
    golds = p.answer if isinstance(p.answer, list) else [p.answer]
    accepted = {normalise(str(g), case_sensitive=cs) for g in golds}
    got = normalise(extract_answer(submission, p.extract), case_sensitive=cs)
    ok = got in accepted
    return Verdict(passed=ok, score=float(ok), detail=f"answer {got[:80]!r}: {'match' if ok else 'no match'}")


def compile_pattern(pattern: str, flags: str = "") -> Any:
    """The RE2 program for a task's `pattern` with `flags` (any of i, s, m); `ValueError` when RE2
    cannot compile it (bad syntax, back-references, look-around, or over the memory bound)."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MAX_MEM
    inline = "".join(sorted(set(flags) & set("ism")))
    try:
        return re2.compile(f"(?{inline}){pattern}" if inline else pattern, options)
    except re2.error as e:
        detail = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(detail) from e


def verify_regex(task: Task, submission: str, params: RegexParams | None = None) -> Verdict:
    p = params or task.verifier.params_as(RegexParams)
    try:
        pattern = compile_pattern(p.pattern, p.flags)
    except ValueError as e:
        raise VerifierError(f"task {task.id}: bad regex (RE2 syntax): {e}", kind="bad_task") from e
    got = extract_answer(submission, p.extract)
    ok = pattern.fullmatch(got) is not None
    return Verdict(
        passed=ok, score=float(ok), detail=f"answer {got[:80]!r} {'matches' if ok else 'does not match'}"
    )


def verify_numeric(task: Task, submission: str, params: NumericParams | None = None) -> Verdict:
    p = params or task.verifier.params_as(NumericParams)
    gold = parse_number(str(p.answer))
    if gold is None:
        raise VerifierError(f"task {task.id}: gold answer is not a number", kind="bad_task")
    got_text = extract_answer(submission, p.extract)
    got = parse_number(got_text)
    ok = got is not None and math.isclose(got, gold, rel_tol=p.rel_tol, abs_tol=p.abs_tol)
    return Verdict(passed=ok, score=float(ok), detail=f"answer {got_text[:60]!r} vs {gold:g}")
