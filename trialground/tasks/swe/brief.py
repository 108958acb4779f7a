"""Repository tasks sized for a small policy: a brief problem statement, and demonstrations.

`swe:<repo>:<candidates>:brief` is the task set of `swe:<repo>:<candidates>` (the same bugs, splits,
workspaces, grader) with a statement of a few lines instead of the full one: how many tests fail, the
first failure cut to its test frame, its innermost library frame and its first error line, and the test
command. A policy with a 1,024-token context can then read the statement, the tool list, a search and a
page of code and still have room to act.

`demonstrations(arg, split)` gives, for each task of a set, the tool calls of a short solving episode that
a policy can be pre-trained on (`scripts/pretrain_agent.py --swe`): search the definition the bug is in
(or, for a bug in a module-level call, the calls of that name), read the page of code that holds it, edit
the change back (the shortest unique run of whole words around it, or the changed lines), run the suite
(its last line) and submit. These calls are derived from the task's reference (they know where the bug
is), unlike `trialground.rollout.swe_expert`, which finds bugs through the tools alone. Each also
carries, where the catalogue offers one, a plausible wrong edit of the same words (another inverse
mutation at the bug's line) for demonstrations that revise a wrong first edit. With `line_fixes`, the
edit is instead a `sed` command addressed by the bug's line number (`line_fix.py`), for the tasks whose
fix fits one of its kind's patterns.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass

from trialground import pyast
from trialground.tasks.model import Task
from trialground.tasks.swe.build import BugRecord
from trialground.tasks.swe.line_fix import line_fix
from trialground.tasks.swe.mutate import common_ends, inverse_mutations
from trialground.tasks.swe.repos import RepoSpec

PAGE_LINES = 12  # a page of code read in one call (functions longer than this are read page by page)
_FRAME = re.compile(r"^([\w./-]+\.py):(\d+): in (\S+)$")


def _frames(excerpt: str) -> list[tuple[str, list[str]]]:
    """(frame line, the source lines under it) of a pytest traceback excerpt, in order."""
    out: list[tuple[str, list[str]]] = []
    for line in excerpt.splitlines():
        if _FRAME.match(line):
            out.append((line, []))
        elif out and line.startswith("    ") and line.strip() and set(line.strip()) != {"^"}:
            out[-1][1].append(line)
    return out


def brief_excerpt(statement: str, library: tuple[str, ...]) -> str:
    """The first failure of a full statement cut to: its first frame outside the library (the test's,
    unless the statement's excerpt was already cut to its tail: then an interpreter frame) and that frame's
    first source line, its innermost frame in the library (the same), and its first `E` line; each line at
    most 120 chars."""
    marker = "The first failure:\n```\n"
    start = statement.find(marker)
    end = statement.find("\n```", start + len(marker))
    excerpt = statement[start + len(marker) : end] if 0 <= start < end else ""
    frames = _frames(excerpt)
    keep: list[str] = []
    tests = [f for f in frames if not any(f[0].startswith(p.rstrip("/")) for p in library)]
    libs = [f for f in frames if any(f[0].startswith(p.rstrip("/")) for p in library)]
    for frame, source in ([tests[0]] if tests else []) + ([libs[-1]] if libs else []):
        keep += [frame, *source[:1]]
    error = next((line for line in excerpt.splitlines() if line.startswith("E ")), "")
    if error:
        keep.append(error)
    return "\n".join(line[:120] for line in keep)


def brief_statement(spec: RepoSpec, record: BugRecord) -> str:
    """The short statement of one bug (see the module docstring)."""
    paths = " ".join((*spec.pytest_args, *spec.tests))
    n = len(record.fail_to_pass)
    failing = f"{n} of its tests fail" if n > 1 else "1 of its tests fails"
    return (
        f"The `{spec.name}` library in /workspace has a bug: {failing}. The first failure:\n"
        f"{brief_excerpt(record.statement, spec.library)}\n"
        f"Fix the library code. Run the tests with: python3 -I -S .tg/pytest.py {paths} -q -x"
    )


@dataclass(frozen=True)
class Demonstration:
    """A task and the calls of a short episode that solves it; `wrong`: the same edit with a plausible
    wrong replacement, or None."""

    family: str
    task: Task
    expert: tuple[tuple[str, dict[str, str]], ...]
    wrong: dict[str, str] | None


def _enclosing(tree: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    best = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            and (best is None or node.lineno > best.lineno)
        ):
            best = node
    return best


def _code_start(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1].lineno
    return body[0].lineno


def _grow(line: str, lo: int, hi: int) -> tuple[int, int]:
    """[lo, hi) widened by one token on each side (a word, or one other non-space character, with the
    spaces before it)."""
    while lo > 0 and line[lo - 1] == " ":
        lo -= 1
    if lo > 0:
        lo -= 1
        while lo > 0 and (line[lo - 1].isalnum() or line[lo - 1] == "_") and line[lo].isalnum():
            lo -= 1
    while hi < len(line) and line[hi] == " ":
        hi += 1
    if hi < len(line):
        hi += 1
        while hi < len(line) and (line[hi].isalnum() or line[hi] == "_") and line[hi - 1].isalnum():
            hi += 1
    return lo, hi


def _span_edit(buggy: str, pristine: str, old_line: str, new_line: str) -> tuple[str, str] | None:
    """The shortest `old` -> `new` within one changed line (whole words, at least 8 characters) whose `old`
    occurs once in `buggy` and whose replacement gives `pristine`; None if there is none."""
    p, s = common_ends(old_line, new_line)
    lo, hi = p, len(old_line) - s
    while lo > 0 and (old_line[lo - 1].isalnum() or old_line[lo - 1] == "_"):
        lo -= 1
    while hi < len(old_line) and (old_line[hi].isalnum() or old_line[hi] == "_"):
        hi += 1
    while True:
        old = old_line[lo:hi].strip()
        tail = len(old_line) - hi  # the same suffix in the pristine line
        new = new_line[lo : len(new_line) - tail].strip()
        # once in the file, so the occurrence is the one in this line
        if len(old) >= 8 and buggy.count(old) == 1 and buggy.replace(old, new, 1) == pristine:
            return old, new
        if lo == 0 and hi == len(old_line):
            return None
        lo, hi = _grow(old_line, lo, hi)


def _edit(buggy: str, pristine: str) -> tuple[str, str, int, int] | None:
    """(old, new, first line, last line) of one `edit_file` call that turns `buggy` into `pristine`: within
    one changed line, the shortest unique span of whole words (`_span_edit`); else the changed lines (with
    the line before, for a pure insertion), the first line's indentation left out, grown by a line at a
    time until `old` occurs once. None when the change is not one block."""
    a, b = buggy.splitlines(), pristine.splitlines()
    blocks = [
        op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    if len(blocks) != 1:
        return None
    _, i1, i2, j1, j2 = blocks[0]
    if i2 - i1 == 1 and j2 - j1 == 1:  # one line changed: the shortest unique span of it
        span = _span_edit(buggy, pristine, a[i1], b[j1])
        if span is not None:
            return span[0], span[1], i1 + 1, i1 + 1
    if i1 == i2:  # an insertion: anchor it on the line before
        i1, j1 = i1 - 1, j1 - 1
    while i1 >= 0 and i2 <= len(a):
        old = "\n".join(a[i1:i2]).lstrip()
        new = "\n".join(b[j1:j2]).lstrip()
        if old and buggy.count(old) == 1 and buggy.replace(old, new, 1) == pristine:
            return old, new, i1 + 1, max(i2, i1 + 1)
        i2, j2 = i2 + 1, j2 + 1
    return None


def _wrong(buggy: str, path: str, pristine: str, old: str, lines: tuple[int, int]) -> dict[str, str] | None:
    """Another catalogue inverse at the bug's lines, written as a replacement of the same `old`."""
    at = buggy.index(old)
    head, tail = buggy[:at], buggy[at + len(old) :]
    # a `not` added around a condition reads least like a fix: tried last
    for m in sorted(inverse_mutations(path, buggy, lines), key=lambda m: m.kind == "negate"):
        text = m.text
        if text == pristine or not (text.startswith(head) and text.endswith(tail)):
            continue
        new = text[len(head) : len(text) - len(tail)]
        if new and new != old:
            return {"path": path, "old": old, "new": new}
    return None


def demonstration(
    spec: RepoSpec, record: BugRecord, task: Task, pristine: str, *, line_fixes: bool = False
) -> Demonstration | None:
    """The short solving episode of one task (module docstring); None when its fix is not one block.
    `line_fixes`: the repair is a `sed` command addressed by line number (`line_fix.py`), and tasks
    whose fix is not one line of its kind's patterns have none."""
    if line_fixes:
        fix = line_fix(record.text, pristine, record.kind)
        if fix is None:
            return None
        repair: tuple[str, dict[str, str]] = ("bash", {"command": fix.command(record.path)})
        first = last = fix.line
    else:
        edit = _edit(record.text, pristine)
        if edit is None:
            return None
        old, new, first, last = edit
        repair = ("edit_file", {"path": record.path, "old": old, "new": new})
    tree = pyast.parse(record.text)
    fn = _enclosing(tree, first)
    package = spec.library[0].rstrip("/")
    calls: list[tuple[str, dict[str, str]]] = []
    if fn is None:  # a module-level statement: search the name it calls (or its first word)
        stripped = record.text.splitlines()[first - 1].strip()
        name = re.match(r"[A-Za-z_][\w.]*", stripped)
        if name is None:
            return None
        calls.append(
            ("search", {"pattern": name.group(0) + ("(" if "(" in stripped else ""), "path": package})
        )
    else:
        calls.append(("search", {"pattern": f"def {fn.name}(", "path": package}))
        start = _code_start(fn)
        end = fn.end_lineno or start
        if end - start + 1 > PAGE_LINES:
            start += PAGE_LINES * ((first - start) // PAGE_LINES)
            if last >= start + PAGE_LINES:  # the block crosses a page: start the page at it
                start = first
        calls.append(("read_lines", {"path": record.path, "start": str(start), "count": str(PAGE_LINES)}))
    calls.append(repair)
    command = f"python3 -I -S .tg/pytest.py {' '.join((*spec.pytest_args, *spec.tests))} -q -x 2>&1 | tail -1"
    calls.append(("bash", {"command": command}))
    calls.append(("submit", {}))
    wrong = None if line_fixes else _wrong(record.text, record.path, pristine, old, (first, last))
    return Demonstration("swe", task, tuple(calls), wrong)
