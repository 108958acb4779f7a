"""Shared pieces of the environment tests: a small code task and scripted tool calls."""

from __future__ import annotations

from typing import Any

from trialground.envs.toolcalls import format_tool_call
from trialground.tasks.model import Task, VerifierSpec

SOLUTION_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef double(a):\n    return a + a\n"

VISIBLE = "from solution import add\n\n\ndef test_add_small():\n    assert add(1, 2) == 3\n"
HIDDEN = (
    "from solution import add, double\n\n\ndef test_add_big():\n    assert add(10, 20) == 30\n\n\n"
    "def test_double():\n    assert double(4) == 8\n"
)


def code_task() -> Task:
    return Task(
        domain="code",
        prompt="Fix add() in solution.py so the tests pass.",
        files={"solution.py": SOLUTION_BUGGY, "notes/readme.txt": "hello\n"},
        visible_checks={"test_visible.py": VISIBLE},
        hidden_checks={"test_hidden.py": HIDDEN},
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 2}),
    )


def call(name: str, fmt: str = "json_tags", **arguments: Any) -> str:
    return format_tool_call(name, arguments, fmt)  # type: ignore[arg-type]
