"""`ast.parse` that is safe to call from several threads at once.

CPython 3.11 keeps the depth counter of its conversion of a parsed tree into `ast` objects in
interpreter-wide state, seeded from the calling thread's stack depth. A garbage collection inside that
conversion runs finalizers, which may hand the interpreter to another thread; a parse started there, from
another depth, leaves the first with `SystemError: AST constructor recursion depth mismatch`. Host-side
parsing here runs in worker threads (the repair tools' candidate listing, grading, detectors), so every
parse takes one process-wide lock; parses are short, and they hold the interpreter lock anyway.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` under the lock (raises SyntaxError like it)."""
    with _LOCK:
        return ast.parse(source, filename)
