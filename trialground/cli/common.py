"""Helpers shared by the command modules: clear errors with the right exit status."""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING, Literal, NoReturn

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from trialground.tasks.model import Task

err_console = Console(stderr=True)

STDIN = "-"  # an input file or task source given as `-` is read from standard input

EXIT_USAGE = 2
EXIT_INFRA = 3


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `message` on stderr and exit with `code` (2: bad input, 3: infrastructure failure)."""
    # escaped: a message is text, and "[...]" in it (an extra, a list) is not markup; paths stay whole
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def require(modules: tuple[str, ...], extra: str, what: str) -> None:
    """Exit 2 with the `pip install` line when one of `modules` is not installed."""
    import importlib.util

    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        names = ", ".join(map(repr, absent))
        fail(f"{what} needs {names}, not installed: pip install 'trialground[{extra}]'")


def not_built(what: str) -> NoReturn:
    fail(f"`trialground {what}` is not built yet", code=EXIT_USAGE)


def listen_or_fail(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or exit 3 with one line (a port in use, a bad address)."""
    from trialground.ports import listen, listen_error

    if not 0 <= port <= 65535:
        fail(f"--port: {port} is not a TCP port (0..65535)", EXIT_USAGE)
    try:
        return listen(host, port)
    except OSError as exc:
        fail(listen_error(host, port, exc), EXIT_INFRA)


def load_tasks(
    spec: str, *, seed: int = 0, n: int | None = None, split: Literal["train", "eval"] | None = None
) -> list[Task]:
    """The tasks of a source spec (`trialground.tasks.sources.load_source`), or with `-` the JSONL tasks on
    standard input (cut to the first `n`, filtered by `split` as a task file is). Raises `TaskError`."""
    if spec.strip() != STDIN:
        from trialground.tasks.sources import load_source

        return load_source(spec, seed=seed, n=n, split=split)
    from trialground.tasks.io import read_jsonl

    tasks = [t for t in read_jsonl(STDIN) if split is None or t.split == split]
    return tasks[:n] if n is not None else tasks
