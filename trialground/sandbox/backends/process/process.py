"""The `process` backend: plain subprocesses with rlimits. It does NOT isolate anything.

For machines without bubblewrap, chosen explicitly (`backend="process"`), never as a silent fallback.
Commands run as the host user in a host temp directory (its path, not /workspace), can read and write
whatever that user can, and `setsid` children may escape the kill. Limits: wall time (the command's
process group is killed), RLIMIT_CPU/FSIZE/AS/NPROC, output cut at `output_bytes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import time
from collections.abc import Mapping

from trialground.errors import SandboxError
from trialground.sandbox.base import (
    WORKSPACE,
    Command,
    ExecResult,
    Limits,
    Sandbox,
    SandboxConfig,
    text_bytes,
)
from trialground.sandbox.beneath import read_limit
from trialground.sandbox.results import Collected, build_result
from trialground.sandbox.workspace import Workspace

log = logging.getLogger(__name__)
WARNING = "sandbox backend 'process' does NOT isolate: commands run as this user with full host access"


def _limit_child(lim: Limits):
    def preexec() -> None:
        cpu = max(1, int(lim.cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_size_mb << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_AS, (lim.memory_mb << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return preexec


class ProcessSandbox(Sandbox):
    def __init__(self, config: SandboxConfig, workspace: Workspace) -> None:
        self.config = config
        self.workspace = workspace
        self._closed = False

    @classmethod
    async def create(
        cls, config: SandboxConfig, files: Mapping[str, str | bytes] | None = None
    ) -> ProcessSandbox:
        log.warning(WARNING)
        workspace = Workspace(config.limits.disk_mb, None, overlay=False)
        for path, data in (files or {}).items():
            workspace.write(path, data)
        return cls(config, workspace)

    async def exec(
        self,
        cmd: Command,
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError("sandbox is closed", kind="closed")
        lim = limits or self.config.limits
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise SandboxError("empty command", kind="bad_command")
        # `cwd` is relative to the workspace, or absolute under WORKSPACE (the grading runner's /workspace)
        inner = cwd.removeprefix(WORKSPACE) if cwd is not None and cwd.startswith(WORKSPACE) else cwd
        workdir = str(self.workspace.ws if inner is None else self.workspace.ws / inner.lstrip("/"))
        base_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workspace.ws),
            "LANG": "C.UTF-8",
        }
        start = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=workdir, env={**base_env, **(env or {})},
                start_new_session=True, preexec_fn=_limit_child(lim),
            )  # fmt: skip
        except FileNotFoundError:
            message = f"sandbox: command not found: {argv[0]}\n".encode()
            return build_result({"exit_code": 127}, b"", message, cap=lim.output_bytes)
        out = Collected(cap=lim.output_bytes)
        reason = ""
        exceeded = asyncio.Event()

        async def pump(stream: asyncio.StreamReader | None, kind: str) -> None:
            # Reads to EOF even past the cap (`out` keeps only the cap): asyncio's wait() only returns
            # once the pipes are drained and closed.
            while stream is not None and (chunk := await stream.read(1 << 16)):
                out.add(kind, chunk)
                if out.seen[kind] > lim.output_bytes:
                    exceeded.set()

        async def feed() -> None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(text_bytes(stdin))
                await proc.stdin.drain()
                proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass

        pumps = asyncio.gather(pump(proc.stdout, "O"), pump(proc.stderr, "E"), feed(), proc.wait())
        stop = asyncio.ensure_future(exceeded.wait())
        waiters: set[asyncio.Future[object]] = {pumps, stop}  # type: ignore[arg-type]
        done, _ = await asyncio.wait(waiters, timeout=lim.wall_s, return_when=asyncio.FIRST_COMPLETED)
        if pumps not in done:
            reason = "output_limit" if stop in done else "timeout"
        stop.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            await asyncio.wait_for(asyncio.shield(pumps), timeout=2)
        except TimeoutError:
            # A process that left the group still holds the pipes: close them so the wait can end.
            proc._transport.close()  # type: ignore[attr-defined]
            pumps.cancel()
            with contextlib.suppress(asyncio.CancelledError, ProcessLookupError):
                await pumps
        await proc.wait()
        status = proc.returncode
        report: dict = {"reason": reason, "wall_s": time.monotonic() - start}
        report.update({"stdout_bytes": out.seen["O"], "stderr_bytes": out.seen["E"]})
        if status is not None and status < 0:
            report["signal"] = -status
        else:
            report["exit_code"] = status
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # approximate when execs overlap
        report["cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        report["maxrss_kb"] = after.ru_maxrss
        return build_result(report, bytes(out.stdout), bytes(out.stderr), cap=lim.output_bytes)

    async def write(self, path: str, data: bytes | str) -> None:
        self.workspace.write(path, data)

    async def read(self, path: str, limit: int | None = None) -> bytes:
        return self.workspace.read(path, read_limit(limit))

    async def snapshot(self) -> str:
        return self.workspace.snapshot()

    async def restore(self, snapshot_id: str) -> None:
        self.workspace.restore(snapshot_id)

    async def fork(self) -> Sandbox:
        child = ProcessSandbox(self.config, Workspace(self.config.limits.disk_mb, None, overlay=False))
        child.workspace.seed_from(self.workspace)
        return child

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.workspace.close()
