"""One error type per boundary.

A failed rollout is data: these errors are caught at the boundary where they happen, recorded on the
trajectory as an `ErrorInfo`, and excluded from baselines and gradients. They never become a silent
reward of 0 and never cancel sibling rollouts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ErrorBoundary = Literal["sandbox", "policy", "verifier", "task", "env", "config"]


class TrialgroundError(Exception):
    """Base of every error the project raises on purpose."""

    boundary: ErrorBoundary = "env"

    def __init__(self, message: str, *, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind

    def info(self) -> ErrorInfo:
        return ErrorInfo(boundary=self.boundary, kind=self.kind, message=str(self))


class SandboxError(TrialgroundError):
    """The sandbox itself failed (not the program inside it)."""

    boundary: ErrorBoundary = "sandbox"


class PolicyError(TrialgroundError):
    """Generation failed: the model server died, returned garbage, or timed out."""

    boundary: ErrorBoundary = "policy"


class VerifierError(TrialgroundError):
    """Grading could not reach a verdict (not: the submission failed)."""

    boundary: ErrorBoundary = "verifier"


class TaskError(TrialgroundError):
    """A task or task file is malformed."""

    boundary: ErrorBoundary = "task"


class EnvError(TrialgroundError):
    """The environment could not carry on the episode."""

    boundary: ErrorBoundary = "env"


class ConfigError(TrialgroundError):
    """A configuration file or override is invalid."""

    boundary: ErrorBoundary = "config"


class ErrorInfo(BaseModel):
    """An infrastructure failure recorded as data on a trajectory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    boundary: ErrorBoundary
    kind: str
    message: str
