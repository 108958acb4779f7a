"""One-line repairs written as a `sed` command addressed by line number, for demonstrations.

A small policy copies a line number and a few operator or digit tokens far more reliably than it copies a
run of code: `edit_file` needs `old` reproduced exactly and `new` composed from it. For a bug whose fix
changes one line, `line_fix` gives the repair as a `bash` call of the form

    sed -i -E '57s/ <= / < /' inflection/__init__.py

from a small set of patterns, one family per bug kind of the catalogue (`mutate.py`):

- `compare`, `operator`: one operator between spaces replaced by another (` <= ` by ` < `);
- `off_by_one`: an integer literal replaced by the one below it (`\\b4\\b` by `3`);
- `swap_args`: the first two comma-separated arguments after an opening parenthesis swapped
  (`\\(([^,()]+), ([^,()]+)` by `(\\2, \\1`);
- `negate`: `not ` put back after `if`, `elif` or `while`.

The `k`-th match on the line is addressed with sed's numeric flag. A candidate is kept only when the
line it produces gives the same syntax tree as the pristine file (quoting and spacing may differ, the
program may not). `sed_line` computes what GNU sed does with the command; the tests run the real `sed`
on every catalogue bug of the inflection module that has a line fix.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from trialground import pyast

_ERE_SPECIAL = set(".[]()*+?{}|^$\\/")
_REPLACEMENT_SPECIAL = set("\\&/")
# operator text -> the texts a catalogue mutation could have come from (its inverses)
_OPERATOR_FIXES: dict[str, tuple[str, ...]] = {
    "+": ("-",), "-": ("+",), "*": ("//", "/"), "//": ("*", "%"), "&": ("|",), "|": ("&",),
    "and": ("or",), "or": ("and",), "<": ("<=",), "<=": ("<",), ">": (">=",), ">=": (">",),
    "==": ("!=",), "!=": ("==",), "in": ("not in",), "not in": ("in",), "is": ("is not",),
    "is not": ("is",),
}  # fmt: skip
_SWAP = r"\(([^,()]+), ([^,()]+)"
_NEGATE = r"\b(if|elif|while) "


@dataclass(frozen=True)
class LineFix:
    """Replace the `k`-th match of the ERE `pattern` on line `line` with `replacement` (sed syntax)."""

    line: int
    pattern: str
    replacement: str
    k: int

    def command(self, path: str) -> str:
        flag = str(self.k) if self.k > 1 else ""
        return f"sed -i -E '{self.line}s/{self.pattern}/{self.replacement}/{flag}' {path}"


def _ere(literal: str) -> str:
    return "".join("\\" + c if c in _ERE_SPECIAL else c for c in literal)


def _rep(literal: str) -> str:
    return "".join("\\" + c if c in _REPLACEMENT_SPECIAL else c for c in literal)


def _python_pattern(pattern: str) -> str:
    r"""The ERE as a Python pattern: identical for what this module writes (escaped literals, `\b`,
    `[^,()]`, groups); `\/` (the delimiter) is a plain `/`."""
    return pattern.replace("\\/", "/")


def _python_replacement(replacement: str) -> str:
    return re.sub(r"\\([\\&/])", lambda m: "\\\\" if m.group(1) == "\\" else m.group(1), replacement)


def sed_line(text: str, fix: LineFix) -> str | None:
    """`text` with `fix` applied as `sed -E` applies it; None when the line has no `k`-th match."""
    lines = text.split("\n")
    if not 1 <= fix.line <= len(lines):
        return None
    target = lines[fix.line - 1]
    matches = list(re.finditer(_python_pattern(fix.pattern), target))
    if len(matches) < fix.k:
        return None
    m = matches[fix.k - 1]
    new = m.expand(_python_replacement(fix.replacement))
    lines[fix.line - 1] = target[: m.start()] + new + target[m.end() :]
    return "\n".join(lines)


def _candidates(line_no: int, line: str, kind: str) -> Iterator[LineFix]:
    def every(pattern: str, replacement: str) -> Iterator[LineFix]:
        for k in range(1, len(re.findall(_python_pattern(pattern), line)) + 1):
            yield LineFix(line_no, pattern, replacement, k)

    if kind in ("compare", "operator"):
        for bad, goods in _OPERATOR_FIXES.items():
            if f" {bad} " in line:
                for good in goods:
                    yield from every(_ere(f" {bad} "), _rep(f" {good} "))
    elif kind == "off_by_one":
        for digits in sorted(set(re.findall(r"\b\d+\b", line))):
            if int(digits) >= 1:
                yield from every(rf"\b{digits}\b", str(int(digits) - 1))
    elif kind == "swap_args":
        yield from every(_SWAP, r"(\2, \1")
    elif kind == "negate":
        yield from every(_NEGATE, r"\1 not ")


def line_fix(buggy: str, pristine: str, kind: str) -> LineFix | None:
    """The first pattern of `kind`'s family that turns `buggy` into a program equal to `pristine` by
    one substitution on the one changed line; None when the change is not one line or none fits."""
    a, b = buggy.split("\n"), pristine.split("\n")
    blocks = [
        op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    if len(blocks) != 1 or blocks[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = blocks[0]
    if i2 - i1 != 1 or j2 - j1 != 1:
        return None
    try:
        want = ast.dump(pyast.parse(pristine))
    except SyntaxError:
        return None
    for fix in _candidates(i1 + 1, a[i1], kind):
        fixed = sed_line(buggy, fix)
        try:
            if fixed is not None and ast.dump(pyast.parse(fixed)) == want:
                return fix
        except SyntaxError:
            continue
    return None
