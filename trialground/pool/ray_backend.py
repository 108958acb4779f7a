"""The Ray backend: sandboxes live in worker actors spread over the cluster's CPU nodes.

Each `SandboxWorker` actor (``num_gpus=0``, scheduling strategy ``SPREAD``, so it never takes a GPU
worker's slot) hosts many sandboxes made with `open_sandbox` on its node; the pool talks to them through
`RaySandbox`, an ordinary `Sandbox`, so environments and the pool are the same program locally and on a
cluster. `RayBackend.start` joins the cluster at `PoolConfig.ray_address` (or starts a local one when Ray
is not yet initialised).

Faults: a worker that dies (node lost, OOM, ``ray.kill``) turns every call on its sandboxes into
`SandboxError(kind="worker_lost")` — the episodes on it end as environment errors, the pool recycles their
slots — and the backend starts a replacement worker at once, so capacity is restored. The dead worker's
workspace directory and mounts are removed by a cleanup task pinned to its node (its sandbox processes
die with it: bubblewrap runs them with --die-with-parent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialground.envs.tool_env import workspace_files
from trialground.errors import SandboxError, TrialgroundError
from trialground.pool.backend import SandboxBackend
from trialground.pool.config import PoolConfig
from trialground.sandbox.base import Command, ExecResult, Limits, Sandbox, SandboxConfig
from trialground.tasks.model import Task

log = logging.getLogger(__name__)
LOCAL_START_TRIES = 3


def _is_ray(process: Any) -> bool:
    """Whether a process is one of Ray's own (its control store, raylet, monitors: all run from Ray's
    package), not something another thread of this process started meanwhile."""
    try:
        return "/ray/" in " ".join(process.cmdline())
    except Exception:  # gone, or not ours to read
        return False


def start_ray(address: str | None = None, **kwargs: Any) -> None:
    """`ray.init(address, **kwargs)`, with a local cluster's start tried up to LOCAL_START_TRIES times:
    Ray gives a new local node 30 s to register with its control store (a constant, not a setting), which
    a machine loaded far past its cores can miss. A timed-out try leaves the node's processes (children of
    this one, run from Ray's package) running with nobody to stop them: they are killed before the next
    try. Any other error, and the last try's, propagates."""
    import psutil  # a dependency of Ray's
    import ray

    me = psutil.Process()
    for attempt in range(1, LOCAL_START_TRIES + 1):
        before = {child.pid for child in me.children()}
        try:
            ray.init(address=address, **kwargs)
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == LOCAL_START_TRIES:
                raise
            log.warning(
                "Ray's local node did not start in time (try %d of %d): %s", attempt, LOCAL_START_TRIES, exc
            )
            ray.shutdown()
            started = [child for child in me.children() if child.pid not in before and _is_ray(child)]
            for child in started:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            psutil.wait_procs(started, timeout=10)


CGROUP_LIST = "cgroups.txt"


class SandboxWorker:
    """The actor body (wrapped with ``ray.remote`` at start). Answers ``(ok, payload)`` tuples, never raises:
    exceptions would lose their `kind` crossing the process boundary."""

    def __init__(self, config_json: str, root: str) -> None:
        os.environ["TRIALGROUND_SANDBOX_DIR"] = root  # before the sandbox modules are imported here
        Path(root).mkdir(parents=True, exist_ok=True)
        self.config = SandboxConfig.model_validate_json(config_json)
        self.root = root
        self.boxes: dict[str, Sandbox] = {}

    async def node(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def _record(self, box: Sandbox) -> str:
        sid = uuid.uuid4().hex
        self.boxes[sid] = box
        cgroup = getattr(box, "cgroup", None)
        if cgroup is not None:  # so a cleanup after this worker dies can remove them
            with open(os.path.join(self.root, CGROUP_LIST), "a") as f:
                f.writelines(f"{d}\n" for d in cgroup.dirs.values())
        return sid

    async def open(self, files: Mapping[str, str | bytes]) -> tuple[str, Any]:
        from trialground.sandbox.factory import open_sandbox

        try:
            return "ok", self._record(await open_sandbox(self.config, files))
        except Exception as e:
            return _error(e)

    async def call(self, sid: str, op: str, args: tuple[Any, ...]) -> tuple[str, Any]:
        box = self.boxes.get(sid)
        if box is None:
            return "error", ("SandboxError", "closed", f"no sandbox {sid} on this worker")
        try:
            if op == "exec":
                cmd, stdin, env, cwd, limits = args
                return "ok", await box.exec(cmd, stdin=stdin, env=env, cwd=cwd, limits=limits)
            if op == "read":
                return "ok", await box.read(args[0], args[1] if len(args) > 1 else None)
            if op == "write":
                await box.write(args[0], args[1])
                return "ok", None
            if op == "snapshot":
                return "ok", await box.snapshot()
            if op == "restore":
                await box.restore(args[0])
                return "ok", None
            if op == "hand_over":
                await box.hand_over(args[0])
                return "ok", None
            if op == "fork":
                return "ok", self._record(await box.fork())
            if op == "close":
                self.boxes.pop(sid, None)
                await box.close()
                return "ok", None
            return "error", ("SandboxError", "bad_op", f"unknown operation {op!r}")
        except Exception as e:
            return _error(e)

    async def close_all(self) -> int:
        boxes, self.boxes = list(self.boxes.values()), {}
        await asyncio.gather(*(b.close() for b in boxes), return_exceptions=True)
        return len(boxes)


def _error(e: Exception) -> tuple[str, Any]:
    kind = e.kind if isinstance(e, TrialgroundError) else type(e).__name__
    return "error", (type(e).__name__, kind, str(e))


def _raise(payload: tuple[str, str, str]) -> None:
    name, kind, message = payload
    if name in ("FileNotFoundError", "IsADirectoryError", "PermissionError"):
        raise {"FileNotFoundError": FileNotFoundError, "IsADirectoryError": IsADirectoryError}.get(
            name, PermissionError
        )(message)
    raise SandboxError(message, kind=kind)


def reap_worker_dir(root: str) -> None:
    """Remove what a dead worker left on its node: mounts under `root`, its cgroups, the directory."""
    from trialground.sandbox import mounts

    prefix = root.rstrip("/") + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        lines = []
    points = [ln.split()[4] for ln in lines if ln.split()[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):  # deepest first
        with contextlib.suppress(SandboxError):
            mounts.umount(Path(point))
    listing = Path(root) / CGROUP_LIST
    if listing.exists():
        for d in listing.read_text().split():
            with contextlib.suppress(OSError):
                os.rmdir(d)
    shutil.rmtree(root, ignore_errors=True)


@dataclass(eq=False)
class _Worker:
    handle: Any
    root: str
    node_id: str | None = None
    load: int = 0
    alive: bool = True


class RaySandbox(Sandbox):
    """A sandbox living in a `SandboxWorker` actor."""

    def __init__(self, backend: RayBackend, worker: _Worker, sid: str) -> None:
        self.backend, self.worker, self.sid = backend, worker, sid
        self._closed = False
        worker.load += 1

    async def _call(self, op: str, *args: Any, extra_s: float = 0.0) -> Any:
        if self._closed or self.backend.closed:
            raise SandboxError("sandbox is closed", kind="closed")
        return await self.backend.call(
            self.worker, self.worker.handle.call.remote(self.sid, op, args), extra_s
        )

    async def exec(
        self,
        cmd: Command,
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        wall = (limits or self.backend.sandbox_config.limits).wall_s
        cmd = cmd if isinstance(cmd, str) else list(cmd)
        env = dict(env) if env is not None else None
        result: ExecResult = await self._call("exec", cmd, stdin, env, cwd, limits, extra_s=wall)
        return result

    async def write(self, path: str, data: bytes | str) -> None:
        await self._call("write", path, data)

    async def read(self, path: str, limit: int | None = None) -> bytes:
        data: bytes = await self._call("read", path, limit)
        return data

    async def snapshot(self) -> str:
        sid: str = await self._call("snapshot")
        return sid

    async def restore(self, snapshot_id: str) -> None:
        await self._call("restore", snapshot_id)

    async def hand_over(self, snapshot_id: str) -> None:
        await self._call("hand_over", snapshot_id)

    async def fork(self) -> Sandbox:
        child: str = await self._call("fork")
        return RaySandbox(self.backend, self.worker, child)

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._call("close")
        except SandboxError:
            pass  # a lost worker took the sandbox with it
        finally:
            self._closed = True
            self.worker.load -= 1


class RayBackend(SandboxBackend):
    def __init__(self, sandbox_config: SandboxConfig, config: PoolConfig, **init_kwargs: Any) -> None:
        self.sandbox_config = sandbox_config
        self.config = config
        self.init_kwargs = init_kwargs  # for a local cluster, e.g. num_cpus=2
        self.workers: list[_Worker] = []
        self.lost = 0
        self._actor: Any = None
        self._starting: asyncio.Future[None] | None = None
        self._owns_ray = False
        self._spawning: set[asyncio.Task[None]] = set()
        self._cleanups: list[Any] = []  # ObjectRefs of reap tasks, awaited on close
        self.spawn_failures = 0
        self.closed = False
        self.opened = 0  # sandboxes opened on the workers: episodes' and grading's

    async def start(self) -> None:
        """Start Ray (unless connected already) and the workers. Concurrent callers (every first acquire
        of a pool calls this) all wait for the same start: none may go on before the workers exist."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        import ray

        if not ray.is_initialized():
            start_ray(self.config.ray_address, **self.init_kwargs)
            self._owns_ray = True
        self._actor = ray.remote(SandboxWorker)
        await asyncio.gather(*(self._spawn() for _ in range(self.config.ray_workers)))

    async def _spawn(self) -> None:
        import ray

        root = os.path.join(tempfile.gettempdir(), "trialground-ray", uuid.uuid4().hex[:12])
        handle = self._actor.options(
            num_cpus=self.config.ray_worker_cpus,
            num_gpus=0,
            scheduling_strategy="SPREAD",
            max_concurrency=1000,
            max_restarts=0,
            runtime_env={"env_vars": {"TRIALGROUND_SANDBOX_DIR": root}},
        ).remote(self.sandbox_config.model_dump_json(), root)
        worker = _Worker(handle, root)
        try:
            ref = handle.node.remote()
            worker.node_id, _ = await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout=120)
        except (ray.exceptions.RayError, TimeoutError):
            # A worker that cannot even start is not replaced (that would loop); capacity shrinks and
            # the failure shows in the metrics.
            self.spawn_failures += 1
            ray.kill(handle)
            return
        self.workers.append(worker)

    def _reap(self, worker: _Worker) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts: dict[str, Any] = {"num_cpus": 0}
        if worker.node_id is not None:
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(worker.node_id, soft=True)
        return ray.remote(reap_worker_dir).options(**opts).remote(worker.root)

    async def call(self, worker: _Worker, ref: Any, extra_s: float, *, raw: bool = False) -> Any:
        """Await an actor call; a dead worker becomes SandboxError(worker_lost) and is replaced."""
        import ray

        try:
            answer = await asyncio.wait_for(
                asyncio.wrap_future(ref.future()), timeout=self.config.ray_call_timeout_s + extra_s
            )
        except ray.exceptions.RayError as e:
            self.worker_lost(worker)
            raise SandboxError(f"sandbox worker lost: {type(e).__name__}", kind="worker_lost") from e
        except TimeoutError as e:
            raise SandboxError("sandbox worker did not answer in time", kind="worker_timeout") from e
        if raw:
            return answer
        status, payload = answer
        if status != "ok":
            _raise(payload)
        return payload

    def worker_lost(self, worker: _Worker) -> None:
        """Replace a dead worker (once) and clean up after it on its node."""
        if not worker.alive:
            return
        worker.alive = False
        self.lost += 1
        if worker in self.workers:
            self.workers.remove(worker)
        self._cleanups.append(self._reap(worker))
        task = asyncio.get_running_loop().create_task(self._spawn())
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def create(self, task: Task) -> Sandbox:
        return await self.open(workspace_files(task))

    async def open(self, files: Mapping[str, str | bytes]) -> Sandbox:
        """A sandbox holding `files` on the least loaded worker (starting the backend on first use)."""
        if self.closed:
            raise SandboxError("the Ray backend is closed", kind="closed")
        await self.start()
        if not self.workers:
            await asyncio.gather(*list(self._spawning), return_exceptions=True)
        if not self.workers:
            raise SandboxError("no sandbox workers", kind="worker_lost")
        worker = min(self.workers, key=lambda w: w.load)
        sid = await self.call(worker, worker.handle.open.remote(dict(files)), 60.0)
        self.opened += 1
        return RaySandbox(self, worker, sid)

    def opener(self) -> Callable[[SandboxConfig, Mapping[str, str | bytes]], Awaitable[Sandbox]]:
        """An `Opener` for the grader (`trialground.verify.kinds.code_tests.Opener`): grading sandboxes on
        this backend's workers. They are made with the workers' sandbox configuration, the run's."""

        async def open_on_ray(_config: SandboxConfig, files: Mapping[str, str | bytes]) -> Sandbox:
            return await self.open(files)

        return open_on_ray

    async def close(self) -> None:
        import ray

        if self.closed:
            return
        self.closed = True  # sandboxes still held (the grader's kept ones) close as no-ops from now on
        await asyncio.gather(*list(self._spawning), return_exceptions=True)
        workers, self.workers = self.workers, []
        for w in workers:
            with contextlib.suppress(SandboxError):
                await self.call(w, w.handle.close_all.remote(), 30.0, raw=True)
            ray.kill(w.handle)
            self._cleanups.append(self._reap(w))
        refs, self._cleanups = self._cleanups, []
        await asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs), return_exceptions=True)
        if self._owns_ray:
            ray.shutdown()

    def metrics(self) -> dict[str, float]:
        return {
            "pool/ray/workers": float(len(self.workers)),
            "pool/ray/workers_lost": float(self.lost),
            "pool/ray/spawn_failures": float(self.spawn_failures),
            "pool/ray/sandboxes_opened": float(self.opened),
        }
