"""One grading request, as a verifier kind's function receives it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from trialground.sandbox.base import Sandbox
from trialground.tasks.model import Task
from trialground.verify.verdict import Action


@dataclass(frozen=True)
class VerifyRequest:
    """One grading: the task, the submission, the episode's sandbox (tool episodes) and actions, and the
    kind's validated params (an instance of the kind's params model)."""

    task: Task
    submission: str
    params: BaseModel
    workspace: Sandbox | None = None
    actions: Sequence[Action] = ()
