"""Sealed checks of the `code_tests` verifier: in a task's hidden checks, every `assert EXPR == LITERAL`
at the top level of a test function's body is rewritten (on the host, in the AST) into a call that sends
EXPR's value, computed in the checker, to the runner's supervisor; the literals reach the sandbox only after
every process of the grading is gone, and the supervisor compares (`sandboxed/runner.py`)."""

from __future__ import annotations

import ast
import functools
import marshal
from types import CodeType
from typing import Any

from trialground import pyast
from trialground.errors import VerifierError

PLACEHOLDER = "<tg-0000>"  # the file name compiled in; the runner's token replaces it per grading


_NOT_LITERAL = object()


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Call):
        return _NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


class _Sealer(ast.NodeTransformer):
    """`assert EXPR == LITERAL` (either order) at the top level of a function body becomes
    `__tg_check__(EXPR, k)`; the literal goes to `expected[k]`, which never enters the worker."""

    def __init__(self) -> None:
        self.expected: list[Any] = []
        self.by_function: dict[str, list[int]] = {}

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        body: list[ast.stmt] = []
        for stmt in node.body:
            sealed = self._seal(stmt)
            if sealed is not None:
                self.by_function.setdefault(node.name, []).append(len(self.expected) - 1)
            body.append(sealed or stmt)
        node.body = body
        return node

    def _seal(self, stmt: ast.stmt) -> ast.stmt | None:
        if not (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare)):
            return None
        test = stmt.test
        if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
            return None
        left, right = test.left, test.comparators[0]
        lv, rv = _literal(left), _literal(right)
        if (lv is _NOT_LITERAL) == (rv is _NOT_LITERAL):
            return None  # no literal side, or two: nothing to seal
        value, expr = (rv, left) if rv is not _NOT_LITERAL else (lv, right)
        try:
            marshal.dumps(value)
        except ValueError:
            return None
        self.expected.append(value)
        call = ast.Call(
            ast.Name("__tg_check__", ast.Load()), [expr, ast.Constant(len(self.expected) - 1)], []
        )
        return ast.copy_location(ast.Expr(call), stmt)


@functools.lru_cache(maxsize=4096)
def sealed(source: str, path: str) -> tuple[CodeType, tuple[Any, ...], dict[str, list[int]]]:
    """The check file with its literal expectations sealed: (code, expected literals, check ids per test)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError as e:
        raise VerifierError(f"{path} does not parse: {e}", kind="bad_task") from e
    sealer = _Sealer()
    tree = ast.fix_missing_locations(sealer.visit(tree))
    code = compile(tree, f"{PLACEHOLDER}:{path}", "exec", dont_inherit=True)
    tests = {k: v for k, v in sealer.by_function.items() if k.startswith("test")}
    return code, tuple(sealer.expected), tests
