"""`trialground report RUN_DIR` and `trialground dashboard RUN_DIR`."""

from __future__ import annotations

from trialground.cli.common import not_built


def report() -> None:
    """Write the HTML report of a run (not built yet)."""
    not_built("report")


def dashboard() -> None:
    """Serve a live dashboard of a run (not built yet)."""
    not_built("dashboard")
