"""Code datasets' rows as `code_tests` tasks: MBPP-style assert lists and APPS-style input/output pairs.

Used by `hf:PATH?format=mbpp|apps` (`hf_source.py`, docs/hf_datasets.md).

- **Assert tests** (MBPP, MBPP+ and the many datasets in their shape): a list of assert statements such as
  `assert remove_Occ("hello", "l") == "heo"`, optionally setup code (`test_setup_code`, `test_imports`).
  Each assert becomes one hidden test (`test_case_01`, ...) of `test_hidden.py`; a name a test calls
  that neither the test, the setup code, the builtins nor the standard library defines is the
  submission's (`remove_Occ = _submission.remove_Occ`), so the tests call the submitted module's function
  through the isolated runner, and an `assert EXPR == LITERAL` is sealed as in every `code_tests` task.
- **Input/output pairs** (APPS, TACO, CodeContests in APPS's `input_output` shape): with `fn_name`, each
  pair is a test calling that function of the submission (`fn(*inputs) == output`); without it the
  submission is a program: a `check_program` task whose checks (one per pair) run `python3 solution.py`
  with the input on stdin and pass when its stdout equals the output line by line (trailing whitespace and
  blank lines at the end ignored).

The submission is the whole module, saved as `solution.py`.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
from collections.abc import Sequence
from typing import Any

from trialground import pyast
from trialground.errors import TaskError

SOLUTION = "solution.py"
HIDDEN = "test_hidden.py"
STDIO_TIMEOUT_S = 10.0  # per stdin/stdout case; the test's own deadline (grading.test_timeout_s) bounds all

_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(sys.stdlib_module_names)


def _bound(nodes: Sequence[ast.stmt], *, top_level_only: bool) -> set[str]:
    """Names the statements bind (assignments, defs, imports, loop and `with` targets, arguments)."""
    names: set[str] = set()
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if top_level_only:
                continue
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names


def _loaded(nodes: Sequence[ast.stmt]) -> list[str]:
    """Names the statements read, in first-use order."""
    seen: dict[str, None] = {}
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                seen.setdefault(node.id, None)
    return list(seen)


def _parse(code: str, what: str, where: str) -> list[ast.stmt]:
    try:
        return pyast.parse(code).body
    except SyntaxError as e:
        raise TaskError(
            f"{where}: {what} is not Python: {e.msg} (line {e.lineno})", kind="invalid_task"
        ) from e


def split_tests(tests: Any, where: str) -> tuple[list[str], str]:
    """(one snippet per test, extra setup code). A list holds one test per item; a single text is split
    into its top-level asserts, its other top-level statements (imports, helpers) becoming setup."""
    if isinstance(tests, str):
        body = _parse(tests, "tests", where)
        snippets = [ast.unparse(s) for s in body if isinstance(s, ast.Assert)]
        setup = "\n".join(ast.unparse(s) for s in body if not isinstance(s, ast.Assert))
        return snippets, setup
    if isinstance(tests, list | tuple) and all(isinstance(t, str) for t in tests):
        return [t for t in tests if t.strip()], ""
    raise TaskError(
        f"{where}: tests: expected a list of assert statements or a text of them, got {type(tests).__name__}",
        kind="invalid_task",
    )


def setup_text(value: Any, where: str) -> str:
    """Setup code from a text column or a list of lines (MBPP's `test_imports`)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise TaskError(
        f"{where}: setup: expected text or a list of lines, got {type(value).__name__}", kind="invalid_task"
    )


def assert_test_file(snippets: Sequence[str], setup: str, where: str) -> tuple[str, list[str]]:
    """(the hidden test file, the submission's names the tests call, first-use order)."""
    if not snippets:
        raise TaskError(f"{where}: tests: no assert statements", kind="invalid_task")
    setup_nodes = _parse(setup, "setup code", where) if setup.strip() else []
    defined = _bound(setup_nodes, top_level_only=True) | _BUILTINS | {"_submission"}
    functions: list[str] = []
    stdlib: list[str] = []
    for i, snippet in enumerate(snippets, start=1):
        body = _parse(snippet, f"test {i}", where)
        if not body:
            raise TaskError(f"{where}: test {i} is empty", kind="invalid_task")
        free = [n for n in _loaded(body) if n not in defined and n not in _bound(body, top_level_only=False)]
        for name in free:
            target = stdlib if name in _STDLIB else functions
            if name not in target:
                target.append(name)
    head = (
        '"""Hidden tests generated by trialground from a dataset row\'s assert statements."""\n'
        "import solution as _submission\n"
        + "".join(f"import {m}\n" for m in stdlib)
        + ("\n# The row's setup code.\n" + setup.rstrip() + "\n" if setup.strip() else "")
    )
    tests = []
    for i, snippet in enumerate(snippets, start=1):
        body = _parse(snippet, f"test {i}", where)
        local = _bound(body, top_level_only=False)
        uses = [n for n in _loaded(body) if n in functions and n not in local]
        lines = [f"    {n} = _submission.{n}" for n in uses]
        lines += ["    " + line for stmt in body for line in ast.unparse(stmt).splitlines()]
        tests.append(f"def test_case_{i:02d}():\n" + "\n".join(lines) + "\n")
    return head + "\n\n" + "\n\n".join(tests), functions


def io_pairs(value: Any, where: str) -> tuple[list[Any], list[Any], str | None]:
    """(inputs, outputs, fn_name) of an APPS-style `input_output` value (a JSON text or a dict)."""
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except json.JSONDecodeError as e:
            raise TaskError(f"{where}: tests: not JSON ({e.msg} at char {e.pos})", kind="invalid_task") from e
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list):
        raise TaskError(
            f"{where}: tests: expected {{'inputs': [...], 'outputs': [...]}}", kind="invalid_task"
        )
    inputs, outputs, fn = data["inputs"], data.get("outputs"), data.get("fn_name")
    if not isinstance(outputs, list) or len(outputs) != len(inputs) or not inputs:
        raise TaskError(
            f"{where}: tests: inputs and outputs must be non-empty lists of one length", kind="invalid_task"
        )
    if fn is not None and (not isinstance(fn, str) or not fn.isidentifier()):
        raise TaskError(f"{where}: tests: fn_name must be a function name, got {fn!r}", kind="invalid_task")
    return inputs, outputs, fn


def as_text(value: Any) -> str:
    return "\n".join(str(v) for v in value) if isinstance(value, list) else str(value)


def io_test_file(inputs: Sequence[Any], outputs: Sequence[Any], fn_name: str) -> str:
    """The hidden test file of call-based input/output pairs (see the module docstring)."""
    tests = []
    for i, (args, out) in enumerate(zip(inputs, outputs, strict=True), start=1):
        call_args = args if isinstance(args, list) else [args]
        # APPS stores a call's result wrapped in a one-item list
        expected = out[0] if isinstance(out, list) and len(out) == 1 else out
        tests.append(
            f"def test_case_{i:02d}():\n    {fn_name} = _submission.{fn_name}\n"
            f"    assert {fn_name}(*{call_args!r}) == {expected!r}\n"
        )
    return (
        '"""Hidden tests generated by trialground from a dataset row\'s input/output pairs."""\n'
        "import solution as _submission\n\n\n" + "\n\n".join(tests)
    )


def io_checks(inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, str]:
    """`check_program` checks of stdin/stdout pairs, one program per pair (`check_01.py`, ...): each runs
    `python3 solution.py` with the input on stdin and exits 0 when its output matches."""
    checks = {}
    for i, (given, expected) in enumerate(zip(inputs, outputs, strict=True), start=1):
        checks[f"check_{i:02d}.py"] = _STDIO_CHECK.format(
            i=i,
            stdin=as_text(given),
            expected=_lines(as_text(expected)),
            path=SOLUTION,
            timeout=STDIO_TIMEOUT_S,
        )
    return checks


_STDIO_CHECK = '''"""Case {i}: the submission run as a program with this input on stdin must print this output
(line by line, trailing whitespace and trailing blank lines ignored). Generated by trialground."""
import subprocess
import sys

STDIN = {stdin!r}
EXPECTED = {expected!r}


def lines(text):
    out = [line.rstrip() for line in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


try:
    done = subprocess.run(
        [sys.executable, {path!r}], input=STDIN, capture_output=True, text=True, timeout={timeout!r}
    )
except subprocess.TimeoutExpired:
    sys.exit("case {i}: no answer within {timeout:g} s")
if done.returncode != 0:
    sys.exit("case {i}: the program exited %d: %s" % (done.returncode, done.stderr[-500:]))
got = lines(done.stdout)
if got != EXPECTED:
    sys.exit("case {i}: expected %r, got %r" % (EXPECTED[:20], got[:20]))
'''


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines
