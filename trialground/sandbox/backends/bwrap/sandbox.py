"""The default backend: bubblewrap namespaces + seccomp + cgroup limits, with a warm supervisor inside.

One `BwrapSandbox` owns one sandbox whose PID 1 is the supervisor (`supervisor.py`), started by one of two
launchers (`config.launcher`): forked from the fork server's template (`forkserver.py`, the default), or
as one bubblewrap process per sandbox (always for `config.rootfs`); both build the same sandbox. Each
`exec` is one request to it, so a warm sandbox runs the next command without new namespaces, and Python
commands fork the already-started interpreter. Commands of one sandbox run one at a time (a lock), and every
process a command started is killed when it ends.

The sandbox sees: a read-only /usr (+ /lib*, /bin, /sbin links), a few files of /etc, the configured Python
runtime (read-only, at its host path), a private /proc and /dev (read-only), private size-limited /tmp and
/dev/shm, the IPC namespace's POSIX queues at /dev/mqueue (all emptied, with every SysV IPC object, on
`restore`), and the workspace at /workspace. Only the workspace, /tmp, /dev/shm and the queues are
writable. Always a network namespace of its own: only loopback, or with `config.network` an outbound-only
uplink (`netns.py`). With `config.rootfs`, that directory's entries replace /usr, /etc and the runtime
(it needs `python3` on its PATH).

On a root host the sandbox also runs as an unprivileged host uid (65534) inside a per-sandbox cgroup
(memory, pids, freezer), and the workspace is a size-limited tmpfs: `limits.disk_mb` of the sandbox's config
is its disk quota (set at creation; snapshots count against it), per-exec limits set everything else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import typing
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import (
    bwrap_cmd,
    cgroup,
    netns,
    offload,
    prewarm,
    reaping,
    reset,
    teardown,
    views,
)
from trialground.sandbox.backends.bwrap.channel import (
    ChannelClosed,
    Collected,
)
from trialground.sandbox.backends.bwrap.forkserver import SandboxProcess
from trialground.sandbox.backends.bwrap.request import exec_request, rlimits
from trialground.sandbox.backends.bwrap.spawn import kill_group
from trialground.sandbox.backends.bwrap.supervised import SupervisorLink
from trialground.sandbox.base import (
    Command,
    ExecResult,
    Limits,
    Sandbox,
    SandboxConfig,
    text_bytes,
)
from trialground.sandbox.beneath import read_limit
from trialground.sandbox.results import build_result, error_result
from trialground.sandbox.workspace import Workspace

log = logging.getLogger(__name__)

SANDBOX_HOST_UID = 65534  # when the host runs as root, sandboxes run as this unprivileged host uid
INNER_UID = views.INNER_UID
bwrap_available = bwrap_cmd.bwrap_available  # where callers have always found it
SUPERVISOR_SLACK_BYTES = 32 << 20  # the supervisor's own memory, on top of the command's limit
# Processes in the sandbox's cgroup besides the command's: the supervisor, and bubblewrap's outer process
# under its launcher (the fork server's intermediate stays outside the cgroup).
SUPERVISOR_PIDS = {"bwrap": 2, "forkserver": 1}
# The reset request at every restore: the scratch directories to empty, and `reset.py` (compiled once there)
RESET_REQUEST = {"reset": {"dirs": ["/tmp", "/dev/shm"], "source": Path(reset.__file__).read_text()}}
SITE_REQUEST = {"site": True}  # load `site` in the supervisor now (warm_python)


class BwrapSandbox(SupervisorLink, Sandbox):
    """A bubblewrap sandbox; create with `await BwrapSandbox.create(config, files)`.

    Starting does not wait for the supervisor's hello: the first request is written right behind the
    supervisor's code and the hello is read before its answer, so a fresh sandbox's first command costs no
    extra round trip (a sandbox that fails to start raises SandboxError at that first request).
    """

    def __init__(self, config: SandboxConfig, workspace: Workspace) -> None:
        self.config = config
        self.workspace = workspace
        self.name = uuid.uuid4().hex[:12]
        self.cgroup = cgroup.create(self.name)
        # What this host cannot enforce (logged once; listed in every result)
        self.limit_warnings = cgroup.limit_warnings(self.cgroup) + cgroup.disk_warning(workspace.tmpfs)
        self._counters = (0, 0)  # the cgroup's (OOM kills, pids refusals) after the last command
        self._uid = workspace.uid
        self._proc: asyncio.subprocess.Process | SandboxProcess | None = None
        self._closing: asyncio.subprocess.Process | SandboxProcess | None = None  # being torn down
        self._greeted = False  # the running supervisor's hello was read
        self._uplink: netns.Uplink | None = None  # a networked sandbox's slirp4netns, while PID 1 lives
        self._lock = asyncio.Lock()
        # Host-side workspace work (reads, writes, snapshot, restore, seeding a fork) runs in worker threads
        # (`offload.py`), one at a time per sandbox under this lock; taken after `_lock` where both are held.
        self._io = asyncio.Lock()
        self._closed = False
        self._freed = False
        self._owner = os.getpid()  # a forked copy of us must never free our sandboxes (`__del__`)
        self.restarts = 0  # restores whose reset could not prove the sandbox clean: it was started afresh
        self._follows = True  # the running sandbox's /workspace follows the host's overlay (`_rebind`)
        self._preload_pending = False  # the preload's answer is still to be read (after the hello)
        self._preload_bytes = 0  # memory the running supervisor's preload took: added to every limit
        self._preload_vm_bytes = 0  # address space it mapped: added to RLIMIT_AS where that is the cap
        self.preload_report: dict = {}  # the running supervisor's answer to the preload
        prewarm.LIVE.add(self)

    @classmethod
    async def create(
        cls, config: SandboxConfig, files: Mapping[str, str | bytes] | None = None
    ) -> BwrapSandbox:
        if not bwrap_cmd.bwrap_available():
            raise SandboxError(
                f"bubblewrap not found at {bwrap_cmd.BWRAP}; install it "
                "(Debian/Ubuntu: apt-get install bubblewrap, "
                "Fedora: dnf install bubblewrap) or choose backend='process' (no isolation)",
                kind="missing_bwrap",
            )
        spare = typing.cast(
            "BwrapSandbox | None", await prewarm.take(config, cls._spare)
        )  # it holds only ours
        sandbox = spare or await cls._fresh(config)
        try:
            for path, data in (files or {}).items():
                await sandbox.write(path, data)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    @classmethod
    async def _fresh(cls, config: SandboxConfig) -> BwrapSandbox:
        if config.network:
            netns.require()  # refused outright: never the host's network instead
        uid = SANDBOX_HOST_UID if os.geteuid() == 0 else None
        workspace = Workspace(config.limits.disk_mb, uid, overlay=config.snapshot_mode != "copy")
        sandbox = cls(config, workspace)
        try:
            if config.warm:
                await sandbox._start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    @classmethod
    async def _spare(cls, config: SandboxConfig) -> BwrapSandbox:
        """A sandbox started ahead (prewarm): only pooled once its supervisor has said hello."""
        sandbox = await cls._fresh(config)
        try:
            async with sandbox._lock, asyncio.timeout(30):
                await sandbox._hello()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def alive(self) -> bool:
        return not self._closed and self._proc is not None and self._proc.returncode is None

    def close_now(self) -> None:
        """Synchronous close where no event loop runs (exit hook, closed loops, teardown). Idempotent."""
        self._closed = True
        self._kill()
        for proc in (self._proc, self._closing):
            if isinstance(proc, SandboxProcess):
                proc.release()
        self._proc = self._closing = None
        self._free()

    def __del__(self) -> None:
        """A sandbox dropped without `close()`: freed now (with a ResourceWarning), not at exit or a sweep."""
        if getattr(self, "_freed", True) or getattr(self, "_owner", None) != os.getpid():
            return
        try:
            self.close_now()
            warnings.warn(f"sandbox {self.name} was never closed; freed it", ResourceWarning, stacklevel=1)
        except Exception:  # at interpreter exit the exit hooks free what is left
            pass

    def _kill(self) -> None:
        """SIGKILL bubblewrap (the sandbox's PID 1 dies with it: --die-with-parent) or the fork server's
        PID 1; every process of the PID namespace dies with PID 1. A networked sandbox's uplink ends too."""
        self._drop_uplink()
        if isinstance(self._proc, SandboxProcess):
            self._proc.kill()
        elif self._proc is not None:
            kill_group(self._proc)  # bubblewrap and, while it is still starting, its child

    def _free(self) -> None:
        """Everything closing frees once the processes are gone: the cgroup and the workspace."""
        if self._freed:
            return
        self._freed = True
        prewarm.LIVE.discard(self)
        if self.cgroup:
            self.cgroup.kill_all()
            self.cgroup.remove()
        self.workspace.close()

    # -- the interface -----------------------------------------------------------------------------------
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
        enforced = self.cgroup.enforced() if self.cgroup else frozenset()
        rl = rlimits(lim, enforced, self._preload_vm_bytes)
        request = exec_request(self.config, cmd, env=env, cwd=cwd, limits=lim, rlimits=rl)
        data = text_bytes(stdin)
        async with self._lock:
            start = time.monotonic()
            if self._greeted and self._proc is not None and self._proc.returncode is not None:
                # PID 1 ended between commands (killed from outside, its launcher died): say so once; the next
                # exec starts afresh. (One that never said hello failed to start: the exchange below says so.)
                await self._stop()
                return error_result("sandbox died: its PID 1 ended between commands", 0.0)
            if self._proc is None:
                await self._start()
            if self.cgroup:
                launcher = "forkserver" if isinstance(self._proc, SandboxProcess) else "bwrap"
                pids = lim.pids + SUPERVISOR_PIDS[launcher]
                memory = lim.memory_mb * 2**20 + SUPERVISOR_SLACK_BYTES + self._preload_bytes
                self.cgroup.set_limits(memory, pids, lim.cpus)
                self.cgroup.start_peak()
            out = Collected(cap=lim.output_bytes)
            try:
                report = await self._exchange(request, data, out, timeout=lim.wall_s + 5)
            except (ChannelClosed, TimeoutError) as exc:
                if self._closed:  # closed while the command ran (close kills at once)
                    raise SandboxError("sandbox is closed", kind="closed") from exc
                # The supervisor did not answer: the sandbox is broken. Kill it; the next exec starts afresh.
                await self._stop()
                if isinstance(exc, TimeoutError):
                    report = {"reason": "timeout", "wall_s": time.monotonic() - start}
                else:
                    return error_result(f"sandbox died: {exc}", time.monotonic() - start)
            except asyncio.CancelledError:
                # The command may still be running and its frames would reach the next exec: start over.
                await asyncio.shield(self._stop())
                raise
            oom = pids_hit = False
            peak = 0
            if self.cgroup:
                # Counters only grow, and nothing runs between commands: the last reading is the baseline.
                before, self._counters = self._counters, self.cgroup.counters()
                oom, pids_hit = self._counters[0] > before[0], self._counters[1] > before[1]
                peak = self.cgroup.peak_bytes()
            if not self.config.warm:
                await self._stop()
        warnings = self.limit_warnings
        if lim.cpus is not None:
            warnings = cgroup.limit_warnings(self.cgroup, cpus=True)
        return build_result(
            report,
            bytes(out.stdout),
            bytes(out.stderr),
            cap=lim.output_bytes,
            oom=oom,
            pids_hit=pids_hit,
            peak_memory_bytes=peak,
            limit_warnings=warnings,
        )

    async def write(self, path: str, data: bytes | str) -> None:
        self._check_open()
        async with self._io:
            await offload.run(self.workspace.write, path, data)

    async def read(self, path: str, limit: int | None = None) -> bytes:
        self._check_open()
        async with self._io:
            return await offload.run(self.workspace.read, path, read_limit(limit))

    async def _settled(self) -> None:
        """Wait until a just-started sandbox has set up its mounts (its hello): an overlay mounted on the
        workspace while bubblewrap is still binding it would be copied in as a locked unit that later
        mount changes (restore) no longer reach."""
        if self._proc is not None and self._proc.returncode is None:
            await self._hello()

    async def _rebind(self) -> None:
        """Before /workspace's overlay changes: stop a sandbox whose bind keeps the old one (only a bind made
        before any overlay, of the shared tmpfs's directory, gets later ones by propagation; a fork's does
        not, nor one made after an unclean restore). The next command binds anew."""
        if not self._follows and self._proc is not None:
            await self._stop()

    async def snapshot(self) -> str:
        self._check_open()
        async with self._lock:
            await self._settled()
            await self._rebind()
            async with self._io:
                return await offload.run(self.workspace.snapshot)

    async def restore(self, snapshot_id: str) -> None:
        self._check_open()
        async with self._lock:
            await self._settled()
            # Left: the supervisor and the next command's process (cwd /), holding nothing under /workspace
            lost = self.workspace.view_lost()
            await self._rebind()
            async with self._io:
                await offload.run(self.workspace.restore, snapshot_id)
            if lost is not None and self.alive():
                # The host's view was unmounted from outside: what the sandbox sees of /workspace (its copy
                # may keep the old overlay) is not provably the restored one. A new sandbox binds it afresh.
                self.restarts += 1
                await self._stop()
                return
            # Everything else a previous occupant could leave is in the sandbox's namespaces or on PID 1: the
            # supervisor removes it and lists what is left (`reset.py`); one not proven clean is stopped.
            if self.alive():
                try:
                    answer = await self._exchange(RESET_REQUEST, b"", Collected(cap=0), timeout=30)
                except (ChannelClosed, TimeoutError):
                    answer = {"left": ["no answer to the reset"]}
                if answer.get("left") != []:
                    self.restarts += 1
                    await self._stop()
            elif self._proc is not None:  # PID 1 died with the occupant: the next one gets a new sandbox
                self.restarts += 1
                await self._stop()

    async def hand_over(self, snapshot_id: str) -> None:
        """A new PID 1 and workspace file system at the snapshot (same id): what no reset undoes, afresh."""
        self._check_open()
        async with self._lock:
            await self._stop()
            async with self._io:
                await offload.run(self.workspace.renew, snapshot_id)
            await self._start()  # bound to the plain directory: the snapshot's overlay reaches it
            await self._settled()
            async with self._io:
                await offload.run(self.workspace.snapshot, snapshot_id)

    async def warm_python(self) -> None:
        """Have the supervisor load `site` now, without running a command: the next Python command's
        process is forked from an interpreter that holds it. Nothing runs in the sandbox meanwhile."""
        self._check_open()
        if not self.config.python_fast:
            return  # commands are exec'd: nothing the supervisor holds reaches them
        async with self._lock:
            if self._proc is None:
                await self._start()
            try:
                await self._exchange(SITE_REQUEST, b"", Collected(cap=0), timeout=60)
            except (ChannelClosed, TimeoutError) as exc:
                await self._stop()
                raise SandboxError(f"sandbox died while loading site: {exc!r}") from exc

    async def fork(self) -> Sandbox:
        self._check_open()
        async with self._lock:
            await self._settled()
            uid = self.workspace.uid
            child_ws = Workspace(self.config.limits.disk_mb, uid, overlay=self.config.snapshot_mode != "copy")
            child = BwrapSandbox(self.config, child_ws)
            try:
                async with self._io:
                    await offload.run(child_ws.seed_from, self.workspace)
                if self.config.warm:
                    await child._start()
            except BaseException:
                await child.close()
                raise
            return child

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed", kind="closed")

    async def close(self) -> None:
        """Kill everything now; reaping and freeing the cgroup and workspace finish in the background
        (`teardown`), so a caller never waits for them."""
        if self._closed:
            return
        self._closed = True
        self._kill()
        proc, self._proc = self._proc, None
        self._closing = proc  # close_now frees it when the teardown never gets to run (its loop closed)
        await teardown.defer(self, self._finish_close(proc))

    async def _finish_close(self, proc: asyncio.subprocess.Process | SandboxProcess | None) -> None:
        try:
            if proc is not None:
                # After a command still running on the same pipes has seen them end (PID 1 is dead).
                async with self._lock:
                    await reaping.reap(proc)
            if self.cgroup:
                for _ in range(500):  # PID 1's own reaping, by the host's init, can lag a little
                    if not self.cgroup.pids():
                        break
                    await asyncio.sleep(0.002)
        finally:
            if isinstance(proc, SandboxProcess):  # a reap cancelled half-way (loop shutting down) leaves
                proc.release()  # its pipes open until garbage collection otherwise
            self._free()
