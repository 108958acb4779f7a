"""A bwrap sandbox's link to its PID 1, the supervisor: starting it from either launcher (the fork server's
template or bubblewrap) with its code and the config's preload, reading its hello and the preload's answer,
one request's exchange, and stopping it. `BwrapSandbox` (`sandbox.py`) holds the state this mixin uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import typing
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import bwrap_cmd, cgroup, forkserver, netns, reaping, seccomp
from trialground.sandbox.backends.bwrap.boot import python_prefix, supervisor_payload
from trialground.sandbox.backends.bwrap.channel import (
    ChannelClosed,
    Collected,
    collect,
    read_frame,
    send_request,
)
from trialground.sandbox.backends.bwrap.forkserver import SandboxProcess
from trialground.sandbox.backends.bwrap.spawn import kill_group, spawn_bwrap
from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.workspace import Workspace

log = logging.getLogger(__name__)
_PRELOAD_WARNED: set[str] = set()  # preload failures logged once per process
PRELOAD_SOURCE = (Path(__file__).with_name("preload.py")).read_text()  # the preload request's code


class SupervisorLink:
    """The supervisor side of a `BwrapSandbox` (see the module docstring)."""

    config: SandboxConfig
    workspace: Workspace
    cgroup: cgroup.Cgroup | None
    preload_report: dict
    _uid: int | None
    _proc: asyncio.subprocess.Process | SandboxProcess | None
    _closed: bool
    _greeted: bool
    _follows: bool
    _preload_pending: bool
    _preload_bytes: int
    _preload_vm_bytes: int
    _uplink: netns.Uplink | None

    def forked(self) -> bool:
        """Whether this sandbox starts from the fork server (else from bubblewrap)."""
        return self.config.launcher == "forkserver" and not self.config.rootfs and forkserver.available()

    async def _start(self) -> None:
        """Start the sandbox's PID 1, the supervisor, from the fork server or bubblewrap (handing it its
        code), and ask for the config's preload as its first request; waits for neither answer (`_hello`
        reads both)."""
        await self._launch()
        self._follows = not self.workspace.mounted
        if self.config.preload and self._proc is not None and self._proc.stdin is not None:
            spec = {"modules": list(self.config.preload), "path": list(self.config.preload_path)}
            request = {"preload": {**spec, "source": PRELOAD_SOURCE}}
            try:
                await send_request(self._proc.stdin, request, b"")
            except ChannelClosed as exc:
                await self._start_failed(exc)
            self._preload_pending = True

    async def _launch(self) -> None:
        self._greeted = self._preload_pending = False
        self._preload_bytes = self._preload_vm_bytes = 0
        self.preload_report = {}
        self._drop_uplink()
        if self.forked():
            self._proc = await forkserver.start(  # cancelled half-way, it leaves nothing behind
                python_prefix=python_prefix(self.config), uid=self._uid, workspace=self.workspace.ws,
                views_=bwrap_cmd.sandbox_views(self.config), network=self.config.network,
                tmp_bytes=self.config.limits.disk_mb << 20, cgroup=self.cgroup,
                before_go=self._attach_uplink if self.config.network else None,
            )  # fmt: skip
            return
        fd = seccomp.filter_fd()
        net = netns.BubblewrapHandshake() if self.config.network else None
        try:
            argv = bwrap_cmd.bwrap_argv(
                self.config, self.workspace.ws, fd, self.config.limits.disk_mb, net.theirs() if net else None
            )
            passed = (fd, *net.theirs()) if net else (fd,)
            self._proc = await reaping.keep_if_cancelled(
                spawn_bwrap(argv, pass_fds=passed, cgroup=self.cgroup, uid=self._uid)
            )
        finally:
            os.close(fd)
            if net is not None:
                net.close_theirs()
        assert self._proc.stdin is not None
        self._proc.stdin.write(supervisor_payload(self.config)[1])
        if net is not None:
            try:
                await net.attach(self._attach_uplink)
            except (SandboxError, TimeoutError) as exc:
                if not net.reported:  # bubblewrap itself failed: its own message says why
                    await self._start_failed(exc)
                await self._stop()
                raise
            except BaseException:
                await self._stop()
                raise
            finally:
                net.close()

    async def _attach_uplink(self, pid: int, pidfd: int | None = None) -> None:
        """Give the sandbox whose PID 1 is host process `pid` its outbound network (`netns.py`)."""
        uplink = await netns.attach(pid, pidfd)
        if self._closed:  # closed while attaching: nothing may outlive the sandbox
            uplink.close()
            raise SandboxError("sandbox is closed", kind="closed")
        self._uplink = uplink

    def _drop_uplink(self) -> None:
        if (uplink := self._uplink) is not None:
            self._uplink = None
            uplink.close()

    async def _hello(self) -> None:
        """Read the supervisor's first frame; one that did not start is stopped (SandboxError says why)."""
        if self._greeted:
            return
        if (proc := self._proc) is None or proc.stdout is None:  # closed while a request was being sent
            raise ChannelClosed("the sandbox was stopped")
        try:
            async with asyncio.timeout(30):
                kind, _ = await read_frame(proc.stdout)
        except (ChannelClosed, TimeoutError) as exc:
            await self._start_failed(exc)
        if kind != "H":
            await self._stop()
            raise SandboxError(f"unexpected first frame {kind!r} from the supervisor")
        self._greeted = True
        if self._preload_pending:
            self._preload_pending = False
            try:  # importing a large package on a loaded machine: seconds
                answer = await asyncio.wait_for(collect(proc.stdout, Collected(cap=0)), timeout=300)
            except (ChannelClosed, TimeoutError) as exc:
                await self._start_failed(exc)
            self.preload_report = answer
            self._preload_bytes = max(0, int(answer.get("rss_kb", 0))) << 10
            self._preload_vm_bytes = max(0, int(answer.get("vm_kb", 0))) << 10
            for error in answer.get("errors", []):
                if error not in _PRELOAD_WARNED:
                    _PRELOAD_WARNED.add(error)
                    log.warning("sandbox.preload: %s (commands import it themselves)", error)

    async def _start_failed(self, exc: Exception) -> typing.NoReturn:
        if self._closed:  # closed while starting: that is all that happened
            raise SandboxError("sandbox is closed", kind="closed") from exc
        err = b""
        if self._proc is not None and self._proc.stderr is not None:
            with contextlib.suppress(TimeoutError):
                err = await asyncio.wait_for(self._proc.stderr.read(1 << 16), timeout=5)
        await self._stop()
        launcher = "the fork server" if self.forked() else "bubblewrap"
        message = err.decode(errors="replace").strip() or "its PID 1 ended before its hello, saying nothing"
        raise SandboxError(f"the sandbox ({launcher}) failed to start: {message}") from exc

    async def _exchange(self, request: dict, stdin: bytes, out: Collected, timeout: float) -> dict:
        """One request to the supervisor and its answer (output into `out`); reads the hello first when
        the supervisor has just started. Raises ChannelClosed / TimeoutError when the supervisor fails."""
        proc = self._proc  # held: `close` drops `_proc` while this awaits
        assert proc is not None and proc.stdin and proc.stdout
        try:
            await send_request(proc.stdin, request, stdin)
        except ChannelClosed as exc:
            if not self._greeted:
                await self._start_failed(exc)
            raise
        await self._hello()
        async with asyncio.timeout(timeout):
            return await collect(proc.stdout, out)

    async def _stop(self) -> None:
        """Kill the sandbox's processes (all of them: PID 1 dying takes its namespace down)."""
        proc, self._proc = self._proc, None
        self._greeted = False
        if proc is not None:
            if isinstance(proc, SandboxProcess):
                proc.kill()
            else:
                kill_group(proc)
            await reaping.reap(proc)
        self._drop_uplink()
        if self.cgroup:
            self.cgroup.kill_all()
