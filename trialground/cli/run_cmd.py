"""`trialground train CONFIG` and `trialground eval CONFIG`."""

from __future__ import annotations

from trialground.cli.common import not_built


def train() -> None:
    """Train (not built yet)."""
    not_built("train")


def evaluate() -> None:
    """Evaluate (not built yet)."""
    not_built("eval")
