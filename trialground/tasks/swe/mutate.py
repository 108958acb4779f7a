"""Procedural bug injection: small AST mutations of library code, each a candidate bug.

Kinds: `operator` (arithmetic and boolean operator flips), `compare` (< vs <=, == vs !=, in vs not in,
is vs is not), `off_by_one` (an integer constant plus one), `drop_else` (an if's else branch removed),
`remove_guard` (an `if` whose body only raises, returns, breaks or continues, removed), `swap_args` (the
first two positional arguments of a call swapped), `negate` (a `not` dropped from a condition).

A mutation rewrites only the source segment of the node it changes (`ast.unparse` of the mutated node,
re-indented), so the rest of the file keeps its bytes and comments; the result must parse. Sites are
listed in a fixed order (file, then `ast.walk` order), so the same tree and seed give the same candidates.
"""

from __future__ import annotations

import ast
import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass

from trialground import pyast

_BINOP_FLIPS: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
}  # fmt: skip
_CMP_FLIPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip
_BOOL_FLIPS: dict[type, type] = {ast.And: ast.Or, ast.Or: ast.And}
_EXITS = (ast.Raise, ast.Return, ast.Break, ast.Continue)


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: `path`'s text with the node at `line` changed (`kind`, `description`)."""

    path: str
    kind: str
    line: int
    description: str
    text: str


def _sites(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and type(node.op) in _BINOP_FLIPS) or (
            isinstance(node, ast.BoolOp) and type(node.op) in _BOOL_FLIPS
        ):
            yield "operator", node
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_FLIPS:
            yield "compare", node
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and 0 <= node.value <= 16
            and hasattr(node, "end_col_offset")
        ):
            yield "off_by_one", node
        elif isinstance(node, ast.If):
            if node.orelse:
                yield "drop_else", node
            if len(node.body) == 1 and isinstance(node.body[0], _EXITS) and not node.orelse:
                yield "remove_guard", node
            if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
                yield "negate", node.test
        elif (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
        ) and ast.dump(node.args[0]) != ast.dump(node.args[1]):
            yield "swap_args", node


def _mutated(kind: str, node: ast.AST) -> tuple[ast.AST | None, str]:
    """(the replacement node, or None to delete the statement; a description)."""
    new = copy.deepcopy(node)
    if isinstance(new, ast.BinOp):
        new.op = _BINOP_FLIPS[type(new.op)]()
        return new, f"{type(node.op).__name__} -> {type(new.op).__name__}"  # type: ignore[attr-defined]
    if isinstance(new, ast.BoolOp):
        new.op = _BOOL_FLIPS[type(new.op)]()
        return new, f"{type(node.op).__name__} -> {type(new.op).__name__}"  # type: ignore[attr-defined]
    if isinstance(new, ast.Compare):
        new.ops = [_CMP_FLIPS[type(new.ops[0])]()]
        return new, f"{type(node.ops[0]).__name__} -> {type(new.ops[0]).__name__}"  # type: ignore[attr-defined]
    if isinstance(new, ast.Constant) and isinstance(new.value, int):
        return ast.Constant(value=new.value + 1), f"{new.value} -> {new.value + 1}"
    if isinstance(new, ast.UnaryOp):
        return new.operand, "dropped `not`"
    if isinstance(new, ast.Call):
        new.args[0], new.args[1] = new.args[1], new.args[0]
        return new, "swapped the first two arguments"
    if isinstance(new, ast.If) and kind == "drop_else":
        new.orelse = []
        return new, "dropped the else branch"
    return None, "removed the guard"


def _replace(source: str, node: ast.AST, replacement: ast.AST | None) -> str:
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined,operator]
    col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    head = lines[start].encode()[:col].decode()
    tail = lines[end].encode()[end_col:].decode()
    text = "pass" if replacement is None else ast.unparse(replacement)
    indent = " " * len(head) if not head.strip() else " " * (len(head) - len(head.lstrip()))
    text = text.replace("\n", "\n" + indent) if isinstance(node, ast.stmt) else text
    if isinstance(node, ast.expr) and "\n" in text:
        text = f"({' '.join(text.split())})"
    return "".join(lines[:start]) + head + text + tail + "".join(lines[end + 1 :])


def _drop_else(source: str, node: ast.If) -> str:
    """The else (or elif chain) of `node` cut out as whole lines; the if's own body keeps its bytes."""
    lines = source.splitlines(keepends=True)
    first = node.body[-1].end_lineno or node.lineno  # the else keyword is on a later line
    end = node.end_lineno or first
    for i in range(first, end):
        if lines[i].lstrip().startswith(("else", "elif")):
            return "".join(lines[:i]) + "".join(lines[end:])
    raise ValueError("no else line")


def mutations(path: str, source: str) -> list[Mutation]:
    """Every candidate bug of one file, in site order; those that would not parse are left out."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return []
    original = ast.dump(tree)
    out: list[Mutation] = []
    for kind, node in _sites(tree):
        replacement, description = _mutated(kind, node)
        try:
            if kind == "drop_else" and isinstance(node, ast.If):
                text = _drop_else(source, node)
            else:
                text = _replace(source, node, replacement)
            changed = ast.dump(pyast.parse(text)) != original
        except (SyntaxError, ValueError, IndexError, UnicodeDecodeError):
            continue
        if changed:
            line = node.lineno  # type: ignore[attr-defined]
            out.append(Mutation(path, kind, line, f"{kind} at {path}:{line}: {description}", text))
    return out


def candidates(files: dict[str, str], *, seed: int, limit: int) -> list[Mutation]:
    """Up to `limit` candidate bugs over `files` (library code), drawn by `seed`, kinds interleaved so a
    small limit still tries each kind."""
    by_kind: dict[str, list[Mutation]] = {}
    for path in sorted(files):
        for m in mutations(path, files[path]):
            by_kind.setdefault(m.kind, []).append(m)
    rng = random.Random(seed)
    for kind in sorted(by_kind):
        rng.shuffle(by_kind[kind])
    order = sorted(by_kind)
    out: list[Mutation] = []
    while len(out) < limit and any(by_kind.values()):
        for kind in order:
            if by_kind[kind] and len(out) < limit:
                out.append(by_kind[kind].pop())
    return out


# The catalogue read backwards: for a node as it stands, the edits that would undo one mutation of the
# catalogue (an operator that some flip produces, flipped back; a constant the off-by-one raised, lowered;
# a `not` that was dropped, restored). A dropped else branch or a removed guard leaves nothing to undo
# from: it has no inverse here.
_BINOP_UNDO: dict[type, tuple[type, ...]] = {}
for _old, _new in _BINOP_FLIPS.items():
    _BINOP_UNDO[_new] = (*_BINOP_UNDO.get(_new, ()), _old)


def _undo_sites(tree: ast.AST) -> Iterator[tuple[str, ast.AST, ast.AST]]:
    """(kind, node, replacement) for every inverse edit of `tree`, in `ast.walk` order."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_UNDO:
            for op in _BINOP_UNDO[type(node.op)]:
                binop = copy.deepcopy(node)
                binop.op = op()
                yield "operator", node, binop
        elif isinstance(node, ast.BoolOp) and type(node.op) in _BOOL_FLIPS:
            boolop = copy.deepcopy(node)
            boolop.op = _BOOL_FLIPS[type(node.op)]()
            yield "operator", node, boolop
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_FLIPS:
            compare = copy.deepcopy(node)
            compare.ops = [_CMP_FLIPS[type(node.ops[0])]()]
            yield "compare", node, compare
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and 1 <= node.value <= 17
            and hasattr(node, "end_col_offset")
        ):
            yield "off_by_one", node, ast.Constant(value=node.value - 1)
        elif isinstance(node, ast.If) and not (
            isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
        ):
            yield "negate", node.test, ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(node.test))
        elif (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
            and ast.dump(node.args[0]) != ast.dump(node.args[1])
        ):
            call = copy.deepcopy(node)
            call.args[0], call.args[1] = call.args[1], call.args[0]
            yield "swap_args", node, call


def common_ends(a: str, b: str) -> tuple[int, int]:
    """How many characters `a` and `b` share at the start, and then at the end (not overlapping)."""
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p and a[-1 - s] == b[-1 - s]:
        s += 1
    return p, s


def inverse_mutations(path: str, source: str, lines: tuple[int, int] | None = None) -> list[Mutation]:
    """Every edit of `source` that undoes one mutation of the catalogue, at nodes starting within
    `lines` (first, last; 1-based, inclusive) when given; those that would not parse are left out. What a
    repair may try at a place it has located; which one is right is for the tests to say."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return []
    original = ast.dump(tree)
    out: list[Mutation] = []
    for kind, node, replacement in _undo_sites(tree):
        line = node.lineno  # type: ignore[attr-defined]
        if lines is not None and not lines[0] <= line <= lines[1]:
            continue
        try:
            text = _replace(source, node, replacement)
            changed = ast.dump(pyast.parse(text)) != original
        except (SyntaxError, ValueError, IndexError, UnicodeDecodeError):
            continue
        if changed:
            what = ast.unparse(replacement)
            out.append(Mutation(path, kind, line, f"{kind} at {path}:{line}: -> {what[:60]}", text))
    return out
