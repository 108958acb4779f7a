"""Reading what an episode left in the agent's workspace, for grading.

The agent controls every path there: a solution that is a FIFO, a socket, a directory, a symlink or a
huge file is something the submission did, so it is a failed submission (`UnreadableSubmission`, turned
into a failed `Verdict` with an `unreadable_solution` flag), never a hang and never an infrastructure
error (those are excluded from baselines, so a submission must not be able to make its own failure one).
The reads themselves are the sandbox's host-side reads (`trialground.sandbox.beneath`): regular files
only, non-blocking, capped in size.
"""

from __future__ import annotations

from trialground.errors import SandboxError
from trialground.sandbox.base import Sandbox
from trialground.verify.verdict import Flag, Verdict

# SandboxError kinds of a read that describe what is at the path (the agent's doing), not a broken sandbox.
SUBMISSION_KINDS = frozenset({"bad_path", "not_a_file", "too_large", "read"})


class UnreadableSubmission(Exception):
    """A file the grader needs from the agent's workspace is not a readable regular file."""

    def __init__(self, path: str, cause: SandboxError) -> None:
        super().__init__(f"{path}: {cause}")
        self.path = path
        self.cause = cause

    def verdict(self) -> Verdict:
        """The failed verdict this submission gets."""
        return Verdict(
            passed=False,
            detail=f"submission file {self.path} cannot be graded: {self.cause}"[:500],
            flags=(Flag(name="unreadable_solution", evidence=str(self)[:300], severity="warn"),),
        )


async def read_submitted(workspace: Sandbox, path: str, limit: int | None = None) -> bytes | None:
    """The bytes of `path` in the agent's workspace; None when it does not exist. Raises
    `UnreadableSubmission` when something that is not a readable regular file is there, or one over
    `limit` bytes (default: the sandbox's own read limit)."""
    try:
        return await workspace.read(path, limit)
    except FileNotFoundError:
        return None
    except SandboxError as exc:
        if exc.kind in SUBMISSION_KINDS:
            raise UnreadableSubmission(path, exc) from exc
        raise
