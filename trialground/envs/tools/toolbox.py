"""A tool's access to the task's sandbox: run a program, read and write a file, hash the workspace.

Every failure of the sandbox backend itself (its own bug, a lost connection) is a `SandboxError` of kind
`crashed`; a path the workspace refuses is a `FileError` the model sees as a tool error, so a tool's
host-side code is told apart from the sandbox's (the environment reports the former as its own `EnvError`,
kind `tool_crashed`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from trialground.errors import SandboxError, TrialgroundError
from trialground.sandbox.base import ExecResult, ExecStatus, Limits, Sandbox
from trialground.tasks.model import Task

# Bytecode caches are keyed by mtime and size, so an edit within the same second that keeps the size
# (a - b -> a + b) would run stale code; tools never write them.
ENV = {"PYTHONDONTWRITEBYTECODE": "1"}

# read_file shows files up to this size whole; of a larger regular file it shows only the first and last
# half of this, cut inside the sandbox, so the host never holds more than this for one call (the host-side
# read stops at the file's size). write_file does not read a larger file to compare, and edit_file
# refuses one.
READ_FILE_MAX_BYTES = 256 << 10
# Paths sorted bytewise (LC_ALL=C) so the digest does not depend on a locale.
_DIGEST = "export LC_ALL=C; find . -type f -print0 | sort -z | xargs -0 -r sha256sum | sha256sum"


class FileError(Exception):
    """A file operation the model asked for failed (bad path, missing, a directory, quota)."""


class FileTooLarge(FileError):
    """The file is over the size a tool reads onto the host."""


# SandboxError kinds that describe the path the model gave, not a broken sandbox.
_PATH_KINDS = frozenset({"bad_path", "not_a_file", "too_large", "read", "write"})


def _backend_failure(op: str, e: Exception) -> SandboxError:
    return SandboxError(f"sandbox {op} failed: {type(e).__name__}: {e}", kind="crashed")


@contextmanager
def _file_access(op: str, path_errors: tuple[type[Exception], ...]) -> Iterator[None]:
    """What a sandbox file access (`op`) raises, as a tool reports it: a path the workspace refuses
    (`path_errors` or a SandboxError of a path kind) is a FileError, a file over the read limit a
    FileTooLarge, the backend's own failure a SandboxError of kind `crashed`."""
    try:
        yield
    except SandboxError as e:
        if e.kind == "too_large":
            raise FileTooLarge(str(e)) from e
        if e.kind in _PATH_KINDS:
            raise FileError(str(e)) from e
        raise
    except path_errors as e:
        raise FileError(str(e) or type(e).__name__) from e
    except TrialgroundError:
        raise
    except Exception as e:
        raise _backend_failure(op, e) from e


class Toolbox:
    """The sandbox access of one task's tool calls."""

    def __init__(self, sandbox: Sandbox, task: Task, limits: Limits, python: str = "python3") -> None:
        self.sandbox = sandbox
        self.task = task
        self.limits = limits
        self.python = python

    async def exec(
        self,
        cmd: list[str] | str,
        limits: Limits,
        stdin: str | bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run a program in the workspace; a broken sandbox (not a failing program) raises SandboxError."""
        try:
            res = await self.sandbox.exec(cmd, stdin=stdin, env=ENV if env is None else env, limits=limits)
        except TrialgroundError:
            raise
        except Exception as e:
            raise _backend_failure("exec", e) from e
        if res.status == ExecStatus.SANDBOX_ERROR:  # the sandbox broke, not the program: end the episode
            raise SandboxError(f"sandbox failed: {res.stderr.strip()[:300]}", kind="sandbox_died")
        return res

    async def workspace_digest(self, limits: Limits | None = None) -> str | None:
        """sha256 over every regular file's path and content in /workspace, as the sandbox sees it now
        (first 16 hex digits); None when the sandbox does not answer with one (a simulated backend)."""
        res = await self.exec(_DIGEST, limits or self.limits)
        digest = res.stdout.split(" ", 1)[0].strip()
        return digest[:16] if res.ok and len(digest) == 64 else None

    async def read(self, path: str) -> bytes:
        """A workspace file of at most READ_FILE_MAX_BYTES (FileTooLarge past it, FileError if refused)."""
        with _file_access("read", (FileNotFoundError, IsADirectoryError, PermissionError, ValueError)):
            return await self.sandbox.read(path, READ_FILE_MAX_BYTES)

    async def read_text(self, path: str) -> str | None:
        """A workspace file as text (undecodable bytes kept as surrogates), or None when it cannot be read."""
        try:
            return (await self.read(path)).decode("utf-8", errors="surrogateescape")
        except FileError:
            return None

    async def write(self, path: str, data: str | bytes) -> None:
        with _file_access("write", (IsADirectoryError, PermissionError, ValueError, OSError)):
            await self.sandbox.write(path, data)
