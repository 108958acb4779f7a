"""What every family's hidden check program needs, shipped with it: `checks.check_source` puts this module's
source before a check program's, so the grading sandbox runs one self-contained file. Standard library only;
a check program imports these names from here only where it is imported on the host as a package module.
"""

import contextlib
import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator

PR_SET_DUMPABLE = 4


def undumpable() -> None:
    """Make this process undumpable: what the submission runs cannot read its memory through /proc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def read_regular(path: str, limit: int) -> str:
    """The text of `path`, a regular file (never followed through a link, never a FIFO) of at most `limit`
    bytes, read once; ValueError for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise ValueError(f"{os.path.basename(path)} is not a regular file of at most {limit} bytes")
        return os.read(fd, limit + 1).decode("utf-8")
    finally:
        os.close(fd)


@contextlib.contextmanager
def scratch(prefix: str, files: dict[str, str]) -> Iterator[str]:
    """A fresh directory holding copies of `files` (name -> text), removed afterwards."""
    home = tempfile.mkdtemp(prefix=prefix)
    try:
        for name, text in files.items():
            with open(os.path.join(home, name), "w", encoding="utf-8") as f:
                f.write(text)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_there(argv: list[str], home: str, timeout: float) -> "subprocess.CompletedProcess[bytes] | None":
    """`argv` run in `home` (its HOME too) under the C locale with the system PATH and no stdin, its output
    captured; None when it ran past `timeout` seconds."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": home}
    try:
        return subprocess.run(
            argv, cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None


class Failed(Exception):
    """The submission fails the check; the message says why."""


def submission(spec_json: str, limit: int) -> tuple[dict, str]:
    """The check's spec and the text of the submission it names (`solution`, at most `limit` bytes), with
    this process made undumpable first; Failed when the submission cannot be read."""
    spec = json.loads(spec_json)
    undumpable()
    try:
        return spec, read_regular(spec["solution"], limit)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise Failed(f"cannot read {spec['solution']}: {e}") from None


def finish(main: Callable[[], "str | None"]) -> None:
    """Run the check's `main` (why the submission fails, or None) and end: exit 0 printing `ok` when it
    passes, else exit 1 printing why."""
    try:
        problem = main()
    except Failed as e:
        problem = str(e)
    print(problem or "ok")
    sys.exit(1 if problem else 0)
