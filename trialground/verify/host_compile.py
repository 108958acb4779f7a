"""Compiling submitted code on the host, quietly.

The host compiles a submission to decide what needs no sandbox run (`grading.precheck_syntax`) and for the
`does_not_compile` evidence; nothing is executed. The compiler's own warnings about the code
(`SyntaxWarning: 'list' object is not callable`, invalid escape sequences) concern the model's text, not the
run, and a policy writes thousands of such files a step: they must not reach the console. Warning filters
are process-wide in Python 3.11, so the change is held under a lock (two compiles never restore each
other's filters); a warning another thread raises during those microseconds is dropped too.
"""

from __future__ import annotations

import threading
import warnings
from types import CodeType

_LOCK = threading.Lock()


def compile_quietly(source: str | bytes, path: str) -> CodeType:
    """`compile(source, path, "exec")` with no inherited flags and every compiler warning ignored (a
    warning made an error by the host's `-W error` is not the sandbox's verdict either). Raises what
    `compile` raises."""
    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(source, path, "exec", dont_inherit=True)
