"""`trialground.pyast.parse` from several threads at once: CPython 3.11 seeds the depth counter of its
tree conversion from the calling thread's stack depth in interpreter-wide state, so a parse that another
thread's parse interleaves with (here: a garbage collection inside the first hands the interpreter to the
second, started deeper in its stack) fails with SystemError. The repair tools hit it listing candidates
for 36 episodes at once."""

from __future__ import annotations

import ast
import asyncio
import gc
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from trialground import pyast

BIG = Path(asyncio.__file__).with_name("base_events.py").read_text()  # enough nodes for a collection


def _interleaved(parse: Callable[[str], object]) -> tuple[bool, list[str]]:
    """`parse(BIG)` here; at the first garbage collection inside it, another thread parses from 30 frames
    deeper and this one waits for it (at most 1 s: a locked parse cannot start until this one ends).
    Returns whether the collection came and the SystemErrors raised in either thread."""
    go, done = threading.Event(), threading.Event()
    errors: list[str] = []
    fired: list[bool] = []

    def deep(n: int) -> None:
        if n:
            deep(n - 1)
            return
        try:
            parse("x = 1")
        except SystemError as e:
            errors.append(str(e))

    def other() -> None:
        go.wait()
        deep(30)
        done.set()

    def callback(phase: str, info: dict) -> None:
        if phase == "start" and threading.current_thread() is threading.main_thread() and not fired:
            fired.append(True)
            go.set()
            done.wait(1.0)

    thread = threading.Thread(target=other)
    thread.start()
    threshold = gc.get_threshold()
    gc.set_threshold(50)  # a collection within the first few hundred objects the conversion makes
    gc.callbacks.append(callback)
    try:
        parse(BIG)
    except SystemError as e:
        errors.append(str(e))
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
        go.set()
        thread.join()
    return bool(fired), errors


def test_a_parse_interleaved_with_another_threads_parse_succeeds() -> None:
    fired, errors = _interleaved(pyast.parse)
    assert fired and errors == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the failure shown is CPython 3.11's")
def test_the_interleaving_is_what_breaks_an_unlocked_parse() -> None:
    """The scenario above does provoke the interpreter's failure when the parses are not serialised, so
    the test before this one shows the lock at work."""
    fired, errors = _interleaved(ast.parse)
    assert fired
    assert errors and all("recursion depth mismatch" in e for e in errors), errors


def test_parse_returns_what_ast_parse_does_and_raises_the_same() -> None:
    assert ast.dump(pyast.parse("a = b + 1")) == ast.dump(ast.parse("a = b + 1"))
    try:
        pyast.parse("def (")
    except SyntaxError as e:
        assert e.lineno == 1
    else:
        raise AssertionError("no SyntaxError")
