"""Helpers shared by the command modules: clear errors with the right exit status."""

from __future__ import annotations

import json
import re
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


KINDS = {EXIT_USAGE: "usage", EXIT_INFRA: "infrastructure"}
# the leading location of a message: `FILE:LINE: ...`, `FILE: ...`, `--option: ...`, `a.dotted.key: ...`
_WHERE = re.compile(r"(\S+?(?::\d+)?): ")


def fail(message: str, code: int = EXIT_USAGE, *, kind: str | None = None) -> NoReturn:
    """Print `message` on stderr and exit with `code` (2: bad input, 3: infrastructure failure). Under a
    command's `--json` the error is one JSON object on stdout instead: `{"error": message, "kind": kind
    (default usage or infrastructure, by `code`), "where": the message's leading location or null}`."""
    if json_requested():
        found = _WHERE.match(message)
        where = found.group(1) if found and "\n" not in found.group(1) else None
        print(json.dumps({"error": message, "kind": kind or KINDS.get(code, "error"), "where": where}))
        sys.exit(code)
    # escaped: a message is text, and "[...]" in it (an extra, a list) is not markup; paths stay whole
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


JSON_ERRORS = [False]  # set by `json_errors`: the command line asked for --json


def json_errors(on: bool) -> None:
    """Answer errors as JSON objects from now on (`trialground.cli.main` sets it when `--json` is given)."""
    JSON_ERRORS[0] = on


def json_requested() -> bool:
    return JSON_ERRORS[0]


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
