"""The sandbox interface: exec / write / read / snapshot / restore / fork / close.

Everything that runs model-produced code goes through a `Sandbox`. Backends are plugins
(`trialground.sandbox.backends`); `open_sandbox` opens one from a `SandboxConfig`.
Paths given to `write`/`read` and `cwd` are relative to the workspace (or absolute under `WORKSPACE`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import TracebackType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trialground.errors import SandboxError
from trialground.plugin import FrozenParams, Params, section_validators

WORKSPACE = "/workspace"


def text_bytes(data: str | bytes | None) -> bytes:
    """Text a sandbox is given (stdin, a file) as UTF-8 bytes; never raises. Model output decoded from JSON
    can hold lone surrogates (`"\\ud800"`). Where they are all in U+DC80..U+DCFF they are the raw bytes they
    escape (as text read with `surrogateescape` gives them back); otherwise each is written in its 3-byte
    form."""
    if data is None:
        return b""
    if isinstance(data, bytes):
        return data
    try:
        return data.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return data.encode("utf-8", "surrogatepass")


class Limits(BaseModel):
    """Resource limits of one `exec`. Every limit is enforced and its breach reported in `ExecResult`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_s: float = Field(10.0, gt=0, le=3600, description="Wall-clock seconds before the process tree dies")
    cpu_s: float = Field(10.0, gt=0, le=3600, description="CPU seconds (RLIMIT_CPU)")
    memory_mb: int = Field(512, ge=16, le=65536, description="Memory ceiling in MiB (cgroup, else RLIMIT_AS)")
    pids: int = Field(
        64, ge=1, le=4096, description="Maximum number of processes/threads (cgroup, else RLIMIT_NPROC)"
    )
    file_size_mb: int = Field(64, ge=1, le=65536, description="Largest file a process may write (MiB)")
    disk_mb: int = Field(256, ge=1, le=65536, description="Workspace disk quota (MiB)")
    output_bytes: int = Field(
        1_000_000, ge=1024, le=1_000_000_000, description="Bytes kept of stdout and of stderr each"
    )
    cpus: float | None = Field(
        None, gt=0, le=1024, description="CPU bandwidth ceiling in cores (cgroup v2 cpu.max); None: none"
    )


class ExecStatus(StrEnum):
    OK = "ok"
    NONZERO_EXIT = "nonzero_exit"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    PIDS_LIMIT = "pids_limit"
    KILLED = "killed"
    SANDBOX_ERROR = "sandbox_error"


class ExecResult(BaseModel):
    """What happened to one command. Produced by the host side; the program cannot forge it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: ExecStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_mb: float = 0.0
    limit_warnings: tuple[str, ...] = Field(
        (), description="Limits this host could not enforce as documented, and what stood in for them"
    )

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK


class View(BaseModel):
    """A host directory shown read-only in every sandbox of a config (bwrap backend)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="Absolute host directory")
    target: str = Field(description="Absolute path in the sandbox (not /workspace, /tmp, /proc or /dev)")
    kept: bool = Field(
        True,
        description="Reached through a kept read-only bind (a directory whose ancestors the sandbox uid "
        "may not traverse, e.g. under /root); False: bound directly (a world-traversable directory)",
    )

    @field_validator("source", "target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\0" in value or ".." in value.split("/"):
            raise ValueError(f"{value!r} is not an absolute path without '..'")
        return value.rstrip("/") or "/"

    @field_validator("target")
    @classmethod
    def _not_private(cls, value: str) -> str:
        if value == "/" or value.split("/")[1] in ("workspace", "tmp", "proc", "dev", "etc"):
            raise ValueError(f"{value!r} would hide a path the sandbox itself mounts")
        return value


class SandboxConfig(BaseModel):
    """How sandboxes are made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(
        "bwrap",
        description="The sandbox backend (trialground.sandbox.backends): bwrap isolates (default); process "
        "does NOT isolate; remote uses the service; or a plugin's 'package.module:NAME'",
    )
    params: Params = Field(
        default_factory=FrozenParams,
        description="The backend's own settings, validated against its settings model (a plugin's; the "
        "built-in backends take theirs from the fields below)",
    )
    limits: Limits = Field(default_factory=Limits, description="Default limits of every exec")
    network: bool = Field(
        False,
        description="Outbound network through slirp4netns from the sandbox's own network namespace "
        "(never the host's: host loopback and abstract sockets stay unreachable); default: none at all",
    )
    rootfs: str | None = Field(None, description="Root filesystem directory to run in instead of the host's")
    remote_url: str | None = Field(None, description="Sandbox service URL for the remote backend")
    token_file: str | None = Field(None, description="File holding the sandbox service token")
    snapshot_mode: Literal["auto", "overlay", "copy"] = Field(
        "auto", description="Workspace snapshots: overlayfs where it works, copying otherwise"
    )
    warm: bool = Field(
        True, description="Keep a long-lived sandbox process to run commands without new namespaces"
    )
    python_prefix: str | None = Field(
        None, description="Python runtime shown read-only in the sandbox (default: our base prefix)"
    )
    prewarm: int = Field(
        1, ge=0, le=16, description="Sandboxes kept started ahead once a config is opened repeatedly (0: off)"
    )
    launcher: Literal["forkserver", "bwrap"] = Field(
        "forkserver",
        description="How bwrap-backend sandboxes start: forked from a started template (fast), or one "
        "bubblewrap process each; rootfs sandboxes always start from bubblewrap",
    )
    python_fast: bool = Field(
        True, description="Run plain `python3 ...` commands by forking a pre-started interpreter"
    )
    views: tuple[View, ...] = Field(
        (), description="Extra host directories shown read-only (bwrap backend; the harness environment's)"
    )
    preload: tuple[str, ...] = Field(
        (),
        description="Python modules the sandbox's supervisor imports when it starts, before any command "
        "(bwrap backend, warm): commands whose environment sets TRIALGROUND_PRELOADED=keep inherit them "
        "imported; the harness environment's `env.harness_preload`",
    )
    preload_path: tuple[str, ...] = Field(
        (), description="Directories (as the sandbox sees them) searched first for the `preload` modules"
    )

    _known_backend, _params_of_backend = section_validators(
        "backend", "trialground.sandbox.backends:BACKENDS", "sandbox."
    )

    @field_validator("preload_path")
    @classmethod
    def _preload_path_read_only(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            top = path.split("/")[1] if path.startswith("/") else ""
            if not top or ".." in path.split("/") or top in ("workspace", "tmp", "dev", "proc"):
                raise ValueError(
                    f"sandbox.preload_path: {path!r} must be an absolute path outside what sandboxed code "
                    "can write (/workspace, /tmp, /dev): preloaded modules reach every later command"
                )
        return value


Command = Sequence[str] | str
"""An argv list, or a string run as a bash script."""


class Sandbox(abc.ABC):
    """An isolated workspace plus a way to run commands in it. Async; see `SyncSandbox` for a facade."""

    @abc.abstractmethod
    async def exec(
        self,
        cmd: Command,
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run `cmd` in the sandbox. Program failures are results; a broken sandbox raises SandboxError."""

    @abc.abstractmethod
    async def write(self, path: str, data: bytes | str) -> None:
        """Write a regular file in the workspace, creating parent directories. Never through a symlink
        (kind `bad_path`) and never into a FIFO, socket, device or directory (kind `not_a_file`)."""

    @abc.abstractmethod
    async def read(self, path: str, limit: int | None = None) -> bytes:
        """Read a regular file from the workspace. Raises FileNotFoundError when it does not exist, and
        SandboxError for a path through a symlink (`bad_path`), anything but a regular file (`not_a_file`)
        or one over `limit` bytes (default and most `beneath.READ_LIMIT`; `too_large`, found from the
        file's size before reading: the host never holds more than `limit` + 1 bytes of it); it never
        blocks on what the sandbox left."""

    @abc.abstractmethod
    async def snapshot(self) -> str:
        """Freeze the current workspace; returns an id usable with `restore`."""

    @abc.abstractmethod
    async def restore(self, snapshot_id: str) -> None:
        """Make the workspace byte-identical to the snapshot; kill leftover processes."""

    async def hand_over(self, snapshot_id: str) -> None:
        """Restore `snapshot_id` for a new occupant (the next episode, the next submission graded): as
        `restore`, and what the previous occupant could count up or set in the sandbox's kernel state
        (the next process id, IPC ids, inode numbers of /tmp and /dev/shm, network counters) starts afresh
        too, so nothing it did can be read by the next. Backends without such state: `restore`."""
        await self.restore(snapshot_id)

    @abc.abstractmethod
    async def fork(self) -> Sandbox:
        """A new, independent sandbox starting from this one's current workspace."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill everything inside and free every resource (processes, mounts, temp directories)."""

    async def warm_python(self) -> None:
        """Prepare this sandbox so that its next Python command starts at once (`ReadyPool`): here, one
        trusted `python3 -c pass`, after which a backend with a warm interpreter loads `site` while idle.
        Backends that can do it without running a command override this. Raises SandboxError if it fails."""
        result = await self.exec(["python3", "-c", "pass"], limits=Limits(wall_s=30, cpu_s=30))
        if not result.ok:
            raise SandboxError(f"python3 -c pass failed in the sandbox: {result.status}")

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
