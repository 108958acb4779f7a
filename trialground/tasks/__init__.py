"""Tasks: the task model, task sources, the task pool and task-set validation."""

from trialground.tasks.model import Task, VerifierSpec

__all__ = ["Task", "VerifierSpec"]
