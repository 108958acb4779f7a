"""Programs a repository task ships into its sandboxes as text (standard library only; the host never imports
them): the pytest launcher (`launcher.py`) and the recorder and replayer of the tests' calls into the
library (`calls.py`)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def program_source(name: str) -> str:
    """The text of the shipped program `name` (e.g. "calls.py")."""
    return resources.files(__name__).joinpath(name).read_text("utf-8")
