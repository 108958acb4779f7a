"""`trialground verify TASKS --solutions FILE`."""

from __future__ import annotations

from trialground.cli.common import not_built


def verify() -> None:
    """Verify solutions against tasks (not built yet)."""
    not_built("verify")
