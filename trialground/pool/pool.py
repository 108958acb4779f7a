"""The environment pool: bounded concurrency, warm sandboxes per task, leases, recycling, reaping.

Contract:
- ``env = await pool.acquire(task)`` waits for one of `max_active` capacity units (FIFO, at most
  `max_queue` waiters, each at most `acquire_timeout_s`), then hands out an environment whose sandbox holds
  the task's pristine workspace: a warm idle sandbox of that task restored from its snapshot (and
  health-checked), else (with `reseed`, by default unless that measures 1.5x slower than creating one) the
  least recently used idle sandbox of another task that no queued acquirer is waiting for, restored,
  emptied from inside and seeded with this task's files, else a new one. The caller then calls
  ``env.reset(task)`` and runs the episode. `pool/reused` counts warm hand-outs, `pool/reseeded` those
  of them that changed task.
- ``await pool.release(env)`` returns it. The sandbox goes back to the warm set unless the episode failed,
  the caller says ``failed=True``, or it reached `max_uses` — then it is closed (recycled). Releasing twice
  or after reclaim is a no-op.
- ``async with pool.lease(task) as env:`` does both; an exception inside recycles the sandbox.
- Full queue -> `PoolFull`; wait too long -> `AcquireTimeout`; sandbox creation failing -> `SandboxError`.
  All are `TrialgroundError`s whose ``info()`` a rollout records; no other caller is affected.
- A lease not released within `lease_s` is reclaimed: the env is revoked (its next step ends the episode
  with kind ``lease_expired``), its sandbox closed and its capacity returned.
- Scheduling is O(1) per acquire/release (deque, dicts, OrderedDict) and O(log n) per lease (a heap);
  quantiles are computed only in `metrics()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from trialground.envs.base import Environment, Grading
from trialground.envs.config import EnvConfig
from trialground.envs.kinds import KINDS as ENV_KINDS
from trialground.envs.tool_env import workspace_files
from trialground.errors import EnvError, ErrorInfo, SandboxError, TrialgroundError
from trialground.pool.autoscale import Autoscaler
from trialground.pool.backend import SandboxBackend
from trialground.pool.backends import make_backend
from trialground.pool.config import PoolConfig
from trialground.pool.gate import AcquireTimeout, CapacityGate, PoolFull  # noqa: F401 - re-exported
from trialground.pool.stats import Window
from trialground.sandbox.base import WORKSPACE, Limits, Sandbox, SandboxConfig
from trialground.tasks.model import Task

EnvFactory = Callable[[Task, Sandbox | None, str | None, Callable[[float], None]], Environment]
_HEALTH_LIMITS = Limits(wall_s=10.0, cpu_s=5.0)
_EMPTY_WORKSPACE = ["find", WORKSPACE, "-mindepth", "1", "-delete"]
# Idle sandboxes looked at (oldest first) for one to reseed whose task nobody waits for: keeps acquire O(1).
_RESEED_SCAN = 8
# `reseed: auto`: a reseed is passed up only while it measures more than _RESEED_MARGIN times a creation
# (under a loaded CPU both queue alike and their averages cross back and forth); then one chance in
# _RESEED_PROBE reseeds anyway, so the estimate follows the machine's load. Moving averages, this weight.
_RESEED_MARGIN = 1.5
_RESEED_PROBE = 32
_COST_WEIGHT = 0.1


def _average(mean: float | None, x: float) -> float:
    return x if mean is None else mean + _COST_WEIGHT * (x - mean)


@dataclass(eq=False)
class Slot:
    id: int
    task_id: str
    sandbox: Sandbox | None
    snapshot: str | None  # the task's pristine workspace, restored on every acquire
    uses: int = 0
    idle_since: float = 0.0


@dataclass(eq=False)
class _Lease:
    seq: int
    slot: Slot
    env: Environment
    start: float


class EnvPool:
    def __init__(
        self,
        config: PoolConfig | None = None,
        *,
        env_config: EnvConfig | None = None,
        sandbox_config: SandboxConfig | None = None,
        grader: Grading | None = None,
        backend: SandboxBackend | None = None,
        env_factory: EnvFactory | None = None,
        needs_sandbox: bool | None = None,
        autoscaler: Autoscaler | None = None,
        sched_clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.config = config or PoolConfig()
        self.env_config = env_config or EnvConfig()
        self.sandbox_config = sandbox_config or SandboxConfig()
        if grader is None and env_factory is None:
            raise EnvError("EnvPool needs a grader (or an env_factory)", kind="config")
        self.grader = grader
        self.backend = backend or make_backend(self.sandbox_config, self.config)
        self._factory = env_factory
        self._kind = ENV_KINDS.lookup(self.env_config.kind)
        if needs_sandbox is None:
            needs_sandbox = self._kind.capabilities.needs_sandbox
        self.needs_sandbox = needs_sandbox
        if autoscaler is None and self.config.autoscale:
            autoscaler = Autoscaler.from_config(self.config)
        self.autoscaler = autoscaler
        # capacity units: held by leases and by acquirers still preparing their sandbox
        self._gate = CapacityGate(self.config.max_active, self.config.max_queue, self._fail)
        self._idle: dict[str, OrderedDict[int, Slot]] = {}
        self._lru: OrderedDict[int, Slot] = OrderedDict()  # every idle slot, oldest first
        self._leases: dict[int, _Lease] = {}  # id(env) -> lease
        self._lease_heap: list[tuple[float, int, int]] = []  # (deadline, seq, id(env)), lazily pruned
        self._ids = itertools.count()
        self._wanted: dict[str, int] = {}  # task id -> acquirers queued for capacity
        self._sandboxes = 0
        self._bg: set[asyncio.Task[None]] = set()
        self._maint: asyncio.Task[None] | None = None
        self._closed = False
        self._next_autoscale = 0.0
        self._resizes = 0  # autoscaler decisions that changed max_active
        self._waits, self._create, self._restore_s = Window(), Window(), Window()
        self._reseed_s = Window()
        # `reseed: auto`: moving averages of a reseed's and a creation's seconds (None: none measured yet)
        self._reseed_cost: float | None = None
        self._create_cost: float | None = None
        self._reseed_dear = 0  # chances met while reseeding measured the dearer path
        self._exec, self._hold = Window(), Window()
        self._counts: dict[str, int] = {
            "acquires": 0,
            "created": 0,
            "reused": 0,
            "reseeded": 0,
            "reseed_skipped": 0,
            "recycled": 0,
            "reaped": 0,
            "reclaimed": 0,
        }
        self._failures: dict[str, int] = {}
        # Times the pool's own bookkeeping (pool/sched_us_per_op); simulations pass time.thread_time_ns
        # to count CPU only, not time lost to other processes.
        self._sched_clock = sched_clock
        self._sched_ns = 0
        self._sched_ops = 0

    # --- public API ---------------------------------------------------------------------------------

    @property
    def max_active(self) -> int:
        return self._gate.limit

    @property
    def active(self) -> int:
        return self._gate.active

    @property
    def idle(self) -> int:
        return len(self._lru)

    @property
    def queue_depth(self) -> int:
        return self._gate.waiting

    async def start(self) -> None:
        """Start the backend and the maintenance task (acquire does this on first use)."""
        if self._closed:
            raise EnvError("pool is closed", kind="pool_closed")
        if self._maint is None:
            if self.needs_sandbox:
                await self.backend.start()
                self.backend.reserve(self._gate.limit, self.config.max_idle)
            self._maint = asyncio.get_running_loop().create_task(self._maintenance())

    async def acquire(self, task: Task, *, timeout: float | None = None) -> Environment:
        if self._maint is None:
            await self.start()
        if self._closed:
            raise EnvError("pool is closed", kind="pool_closed")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        s0 = self._sched_clock()
        granted = self._gate.try_acquire()
        self._tick(s0)
        if not granted:
            # Queued acquirers are counted per task, so that the sandbox parked for this task meanwhile is
            # kept for it rather than reseeded for another (see _take_slot).
            wanted = self._wanted
            wanted[task.id] = wanted.get(task.id, 0) + 1
            try:
                await self._gate.wait(self.config.acquire_timeout_s if timeout is None else timeout)
            finally:
                if (n := wanted[task.id] - 1) > 0:
                    wanted[task.id] = n
                else:
                    del wanted[task.id]
        self._waits.add(loop.time() - t0)
        try:
            slot = await self._take_slot(task)
            env = self._make_env(task, slot)
        except BaseException:
            self._gate.release()
            raise
        s1 = self._sched_clock()
        seq = next(self._ids)
        now = loop.time()
        self._leases[id(env)] = _Lease(seq, slot, env, now)
        heapq.heappush(self._lease_heap, (now + self.config.lease_s, seq, id(env)))
        self._counts["acquires"] += 1
        self._tick(s1)
        return env

    async def release(self, env: Environment, *, failed: bool = False) -> None:
        s0 = self._sched_clock()
        lease = self._leases.pop(id(env), None)
        if lease is None or lease.env is not env:
            return  # released before, or reclaimed after its lease expired
        now = asyncio.get_running_loop().time()
        self._hold.add(now - lease.start)
        revoke = getattr(env, "revoke", None)
        if revoke is not None:  # a stale reference must not act on a sandbox someone else will lease
            revoke(EnvError("environment was released to the pool", kind="released").info())
        slot = lease.slot
        slot.uses += 1
        error: ErrorInfo | None = getattr(env, "error", None)
        if error is not None:
            self._fail(error.kind)
        elif failed:
            self._fail("caller_error")
        if slot.sandbox is not None:
            if error is not None or failed or slot.uses >= self.config.max_uses or self._closed:
                self._counts["recycled"] += 1
                self._destroy(slot)
            else:
                self._park(slot, now)
        self._gate.release()
        self._tick(s0)

    @contextlib.asynccontextmanager
    async def lease(self, task: Task, *, timeout: float | None = None) -> AsyncIterator[Environment]:
        env = await self.acquire(task, timeout=timeout)
        try:
            yield env
        except BaseException:
            await self.release(env, failed=True)
            raise
        await self.release(env)

    async def prewarm(self, tasks: Iterable[Task]) -> int:
        """Create idle sandboxes for `tasks` (one per occurrence) up to `max_idle`; returns how many."""
        if self._maint is None:
            await self.start()
        todo = list(tasks)[: max(0, self.config.max_idle - len(self._lru))]
        slots = await asyncio.gather(*(self._create_slot(t) for t in todo), return_exceptions=True)
        now = asyncio.get_running_loop().time()
        made = 0
        for s in slots:
            if isinstance(s, Slot):
                self._park(s, now)
                made += 1
        return made

    def set_max_active(self, n: int) -> None:
        """Change the concurrency limit; raising it admits waiters at once, lowering it drains."""
        if self.needs_sandbox and self._maint is not None and n > self._gate.limit:
            self.backend.reserve(n, self.config.max_idle)
        self._gate.resize(n)

    def observe_generation(self, seconds: float, concurrency: int) -> None:
        """Report one generation turn (seconds, concurrent sequences) to the autoscaler."""
        if self.autoscaler is not None:
            self.autoscaler.observe_generation(seconds, concurrency)

    def record_exec(self, seconds: float) -> None:
        self._exec.add(seconds)
        if self.autoscaler is not None:
            self.autoscaler.observe_env(seconds)

    def metrics(self) -> dict[str, float]:
        depth_mean, depth_max = self._gate.depth.stats()
        m: dict[str, float] = {
            "pool/active": float(self._gate.active),
            "pool/idle": float(len(self._lru)),
            "pool/queue_depth": depth_mean,  # time-weighted over the last minute, where the queue is
            "pool/queue_depth_max": depth_max,
            "pool/queue_depth_now": float(self._gate.waiting),
            "pool/max_active": float(self._gate.limit),
            "pool/utilisation": self._gate.active / self._gate.limit,
            "pool/sandboxes": float(self._sandboxes),
            "pool/wait_p50_s": self._waits.quantile(0.5),
            "pool/wait_p99_s": self._waits.quantile(0.99),
            "pool/create_s": self._create.mean(),
            "pool/restore_s": self._restore_s.mean(),
            "pool/restore_p50_s": self._restore_s.quantile(0.5),
            "pool/restore_p95_s": self._restore_s.quantile(0.95),
            "pool/restore_p99_s": self._restore_s.quantile(0.99),
            "pool/reseed_s": self._reseed_s.mean(),
            "pool/reseed_p50_s": self._reseed_s.quantile(0.5),
            "pool/reseed_p95_s": self._reseed_s.quantile(0.95),
            "pool/exec_s": self._exec.mean(),
            "pool/exec_p99_s": self._exec.quantile(0.99),
            "env/exec_s": self._exec.mean(),
            "env/exec_p99_s": self._exec.quantile(0.99),
            "pool/hold_s": self._hold.mean(),
            "pool/sched_us_per_op": self._sched_ns / 1000 / max(1, self._sched_ops),
        }
        m.update({f"pool/{k}": float(v) for k, v in self._counts.items()})
        m.update({f"pool/failures/{k}": float(v) for k, v in self._failures.items()})
        if self.autoscaler is not None:
            a = self.autoscaler
            m["pool/autoscale_resizes"] = float(self._resizes)
            m["pool/autoscale_target"] = float(a.current or self._gate.limit)
            m["pool/autoscale_gen_s"] = a.gen_s or 0.0
            m["pool/autoscale_env_s"] = a.env_s or 0.0
        m.update(self.backend.metrics())
        return m

    async def close(self) -> None:
        """Fail waiters, revoke leases, close every sandbox and the backend. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._maint is not None:
            self._maint.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maint
        self._gate.close(EnvError("pool closed while waiting", kind="pool_closed"))
        for lease in list(self._leases.values()):
            self._reclaim(lease, "pool_closed")
        while self._lru:
            self._destroy(self._pop_idle(next(iter(self._lru.values()))))
        while self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)
        await self.backend.close()

    # --- capacity -----------------------------------------------------------------------------------

    def _tick(self, start_ns: int) -> None:
        self._sched_ns += self._sched_clock() - start_ns
        self._sched_ops += 1

    # --- slots ----------------------------------------------------------------------------------------

    def _park(self, slot: Slot, now: float) -> None:
        slot.idle_since = now
        self._idle.setdefault(slot.task_id, OrderedDict())[slot.id] = slot
        self._lru[slot.id] = slot
        while len(self._lru) > self.config.max_idle:
            self._destroy(self._pop_idle(next(iter(self._lru.values()))))

    def _pop_idle(self, slot: Slot) -> Slot:
        del self._lru[slot.id]
        per_task = self._idle[slot.task_id]
        del per_task[slot.id]
        if not per_task:
            del self._idle[slot.task_id]
        return slot

    async def _take_slot(self, task: Task) -> Slot:
        if not self.needs_sandbox:
            return Slot(next(self._ids), task.id, None, None)
        while (per_task := self._idle.get(task.id)) is not None:
            slot = self._pop_idle(next(reversed(per_task.values())))  # most recently used: warmest
            if await self._restore(slot):
                self._counts["reused"] += 1
                return slot
        while (other := self._reseedable()) is not None and self._reseed_pays():
            self._pop_idle(other)
            if await self._reseed(other, task):
                self._counts["reused"] += 1
                self._counts["reseeded"] += 1
                return other
        return await self._create_slot(task)

    def _reseedable(self) -> Slot | None:
        """The least recently used idle sandbox whose task no queued acquirer waits for (among the oldest
        few). A sandbox someone is queued for would be reseeded back for them a moment later: under
        saturation with repeating tasks every acquire would then pay a reseed inside its capacity unit
        instead of a warm restore, so such a sandbox stays and a new one is made instead."""
        if self.config.reseed is False:
            return None
        for slot in itertools.islice(self._lru.values(), _RESEED_SCAN):
            if slot.task_id not in self._wanted:
                return slot
        return None

    def _reseed_pays(self) -> bool:
        """Whether to reseed rather than make a new sandbox. `auto` compares what each has measured: on some
        backends a reseed is the dearer path (through Ray the seed's files cross the actor boundary; a
        backend whose commands are slow pays for emptying the workspace), and it runs inside the acquirer's
        capacity unit. Passed-up chances are counted in `pool/reseed_skipped`."""
        if self.config.reseed != "auto":
            return True
        reseed, create = self._reseed_cost, self._create_cost
        if reseed is None or create is None or reseed <= _RESEED_MARGIN * create:
            return True
        self._reseed_dear += 1
        if self._reseed_dear % _RESEED_PROBE == 0:
            return True
        self._counts["reseed_skipped"] += 1
        return False

    async def _reseed(self, slot: Slot, task: Task) -> bool:
        """Turn a warm sandbox of another task into one for `task`: restored (its processes gone, /tmp and
        /dev/shm emptied), the workspace emptied from inside the sandbox (no host-side path walk), the
        task's files written and snapshotted as its new pristine state."""
        assert slot.sandbox is not None and slot.snapshot is not None
        t0 = asyncio.get_running_loop().time()
        try:
            await slot.sandbox.hand_over(slot.snapshot)
            res = await slot.sandbox.exec(_EMPTY_WORKSPACE, limits=_HEALTH_LIMITS)
            if not res.ok:
                raise SandboxError(f"emptying the workspace failed: {res.status}", kind="reseed")
            for path, data in workspace_files(task).items():
                await slot.sandbox.write(path, data)
            slot.snapshot = await slot.sandbox.snapshot()
        except Exception as e:
            self._fail(e.kind if isinstance(e, TrialgroundError) else "reseed")
            self._destroy(slot)
            return False
        slot.task_id = task.id
        took = asyncio.get_running_loop().time() - t0
        self._reseed_s.add(took)
        self._reseed_cost = _average(self._reseed_cost, took)
        return True

    async def _restore(self, slot: Slot) -> bool:
        assert slot.sandbox is not None and slot.snapshot is not None
        t0 = asyncio.get_running_loop().time()
        try:
            await slot.sandbox.hand_over(slot.snapshot)
            await self._health(slot.sandbox)
        except Exception as e:
            self._fail(e.kind if isinstance(e, TrialgroundError) else "restore")
            self._destroy(slot)
            return False
        self._restore_s.add(asyncio.get_running_loop().time() - t0)
        return True

    async def _health(self, sandbox: Sandbox) -> None:
        mode = self.config.health_check
        probe = getattr(sandbox, "alive", None)
        if mode == "alive" and callable(probe):
            if not probe():
                raise SandboxError("health check: sandbox is not alive", kind="unhealthy")
        elif mode != "off":
            res = await sandbox.exec(["true"], limits=_HEALTH_LIMITS)
            if not res.ok:
                raise SandboxError(f"health check failed: {res.status}", kind="unhealthy")

    async def _create_slot(self, task: Task) -> Slot:
        last: Exception | None = None
        for _ in range(1 + self.config.create_retries):
            t0 = asyncio.get_running_loop().time()
            sandbox: Sandbox | None = None
            self._sandboxes += 1
            try:
                sandbox = await self.backend.create(task)
                snap = await sandbox.snapshot()
            except Exception as e:
                last = e
                self._fail("create")
                self._sandboxes -= 1
                if sandbox is not None:
                    self._spawn(self._close_sandbox(sandbox))
                continue
            took = asyncio.get_running_loop().time() - t0
            self._create.add(took)
            self._create_cost = _average(self._create_cost, took)
            self._counts["created"] += 1
            return Slot(next(self._ids), task.id, sandbox, snap)
        raise SandboxError(f"could not create a sandbox for task {task.id}: {last}", kind="create_failed")

    def _make_env(self, task: Task, slot: Slot) -> Environment:
        if self._factory is not None:
            return self._factory(task, slot.sandbox, slot.snapshot, self.record_exec)
        assert self.grader is not None
        make = self._kind.load("environment kind", EnvError)
        env: Environment = make(
            self.grader, self.env_config, self.sandbox_config, sandbox=slot.sandbox, task=task,
            owns_sandbox=False, initial_snapshot=slot.snapshot, on_exec=self.record_exec,
        )  # fmt: skip
        return env

    def _destroy(self, slot: Slot) -> None:
        sandbox, slot.sandbox = slot.sandbox, None
        if sandbox is not None:
            self._sandboxes -= 1
            self._spawn(self._close_sandbox(sandbox))

    async def _close_sandbox(self, sandbox: Sandbox) -> None:
        try:
            await sandbox.close()
        except Exception:
            self._fail("close")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _fail(self, kind: str) -> None:
        self._failures[kind] = self._failures.get(kind, 0) + 1

    # --- maintenance --------------------------------------------------------------------------------

    def _reclaim(self, lease: _Lease, kind: str) -> None:
        del self._leases[id(lease.env)]
        info = EnvError(f"environment reclaimed: {kind}", kind=kind).info()
        revoke = getattr(lease.env, "revoke", None)
        if revoke is not None:
            revoke(info)
        self._destroy(lease.slot)
        self._gate.release()

    def maintain(self, now: float) -> None:
        """Reclaim expired leases, reap idle sandboxes past their TTL, run the autoscaler."""
        heap = self._lease_heap
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            lease = self._leases.get(key)
            if lease is not None and lease.seq == seq:
                self._counts["reclaimed"] += 1
                self._fail("lease_expired")
                self._reclaim(lease, "lease_expired")
        if len(heap) > 2 * len(self._leases) + 1024:  # drop released entries so the heap stays O(active)
            self._lease_heap = [
                e for e in heap if (ls := self._leases.get(e[2])) is not None and ls.seq == e[1]
            ]
            heapq.heapify(self._lease_heap)
        ttl = self.config.idle_ttl_s
        while len(self._lru) > self.config.min_warm:
            oldest = next(iter(self._lru.values()))
            if now - oldest.idle_since < ttl:
                break
            self._counts["reaped"] += 1
            self._destroy(self._pop_idle(oldest))
        if self.autoscaler is not None and now >= self._next_autoscale:
            self._next_autoscale = now + self.config.autoscale_interval_s
            target = self.autoscaler.decide(now, queue_depth=self._gate.waiting, active=self._gate.active)
            if target is not None and target != self._gate.limit:
                self._resizes += 1
                self.set_max_active(target)

    async def _maintenance(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.maintenance_interval_s)
            self.maintain(loop.time())
