"""Reading a task's check files without running them."""

from __future__ import annotations

import ast

from trialground import pyast


def test_function_names(source: str) -> list[str]:
    """Top-level `def test_*` names of a check file in definition order, read from the AST (never by running
    the file). Raises `SyntaxError` for a file that does not parse."""
    tree = pyast.parse(source)
    return [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
    ]
