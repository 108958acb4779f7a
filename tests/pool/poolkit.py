from __future__ import annotations

from typing import Any

from trialground.tasks.model import Task, VerifierSpec


class NoGrader:
    """The pool's scheduling tests never finish an episode; grading would be a bug here."""

    async def grade(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("grading is not part of these tests")


def make_task(i: int = 0) -> Task:
    return Task(
        domain="code",
        prompt=f"task {i}",
        files={"a.txt": f"content {i}\n"},
        verifier=VerifierSpec(kind="code_tests"),
    )
