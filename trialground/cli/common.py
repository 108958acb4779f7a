"""Helpers shared by the command modules: clear errors with the right exit status."""

from __future__ import annotations

import sys
from typing import NoReturn

from rich.console import Console

err_console = Console(stderr=True)

EXIT_USAGE = 2
EXIT_INFRA = 3


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `message` on stderr and exit with `code` (2: bad input, 3: infrastructure failure)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)  # paths stay whole
    sys.exit(code)


def not_built(what: str) -> NoReturn:
    fail(f"`trialground {what}` is not built yet", code=EXIT_USAGE)
