"""Simulated sandboxes for pool benchmarks and scheduling tests: real interface, in-memory workspace.

`SimSandbox` keeps files in a dict and "runs" a command by sleeping a latency drawn from a distribution
(nothing is executed). Latencies are `LatencyModel`s: lognormal with a given median and spread, or zero
for an instant sandbox. Under `VirtualClockLoop` (trialground.pool.vclock) the sleeps cost no wall time.
`kill()` makes every later call raise `SandboxError(kind="dead")`, as a crashed sandbox would.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trialground.envs.base import Environment, EpisodeEnd, Observation
from trialground.errors import ErrorInfo, SandboxError
from trialground.pool.backend import SandboxBackend
from trialground.sandbox.base import Command, ExecResult, ExecStatus, Limits, Sandbox
from trialground.sandbox.beneath import read_limit
from trialground.tasks.model import Task


@dataclass(frozen=True)
class LatencyModel:
    """Lognormal seconds with median `median_s` and log-space sigma `sigma`; 0 median means instant."""

    median_s: float = 0.0
    sigma: float = 0.5

    def sample(self, rng: random.Random) -> float:
        if self.median_s <= 0:
            return 0.0
        return self.median_s * rng.lognormvariate(0.0, self.sigma)


@dataclass(frozen=True)
class SimProfile:
    create: LatencyModel = LatencyModel()
    restore: LatencyModel = LatencyModel()
    exec: LatencyModel = LatencyModel()
    fail_rate: float = 0.0  # chance that an exec finds the sandbox dead


INSTANT = SimProfile()
# Rough shapes of a local bwrap sandbox: ~50 ms to create, ~3 ms to restore, tool calls of ~0.2 s with a
# heavy tail (tests, builds).
REALISTIC = SimProfile(
    create=LatencyModel(0.05, 0.4), restore=LatencyModel(0.003, 0.3), exec=LatencyModel(0.2, 1.0)
)


async def _pause(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


class SimSandbox(Sandbox):
    def __init__(self, backend: SimBackend, files: Mapping[str, str | bytes]) -> None:
        self.backend = backend
        self.files = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
        self._snaps: dict[str, dict[str, bytes]] = {}
        self.dead = False
        self.closed = False
        backend.live += 1

    def kill(self) -> None:
        self.dead = True

    def alive(self) -> bool:
        """The cheap liveness probe the pool's health check uses (as bwrap sandboxes offer)."""
        return not (self.dead or self.closed)

    def _check(self) -> None:
        if self.dead or self.closed:
            raise SandboxError("simulated sandbox is dead", kind="dead")

    async def exec(
        self,
        cmd: Command,
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        self._check()
        p = self.backend.profile
        await _pause(p.exec.sample(self.backend.rng))
        if p.fail_rate and self.backend.rng.random() < p.fail_rate:
            self.dead = True
        self._check()
        return ExecResult(status=ExecStatus.OK, exit_code=0)

    async def write(self, path: str, data: bytes | str) -> None:
        self._check()
        self.files[path] = data.encode() if isinstance(data, str) else data

    async def read(self, path: str, limit: int | None = None) -> bytes:
        self._check()
        if path not in self.files:
            raise FileNotFoundError(path)
        data = self.files[path]
        if len(data) > read_limit(limit):
            raise SandboxError(
                f"cannot read {path!r}: over the {read_limit(limit)}-byte cap", kind="too_large"
            )
        return data

    async def snapshot(self) -> str:
        self._check()
        sid = f"s{next(self.backend.ids)}"
        self._snaps[sid] = dict(self.files)
        return sid

    async def restore(self, snapshot_id: str) -> None:
        self._check()
        await _pause(self.backend.profile.restore.sample(self.backend.rng))
        self.files = dict(self._snaps[snapshot_id])

    async def fork(self) -> Sandbox:
        self._check()
        return SimSandbox(self.backend, self.files)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.live -= 1


class SimBackend(SandboxBackend):
    """Creates `SimSandbox`es; `live` counts those not yet closed (a leak check)."""

    def __init__(self, profile: SimProfile = INSTANT, seed: int = 0) -> None:
        self.profile = profile
        self.rng = random.Random(seed)
        self.ids = itertools.count()
        self.live = 0
        self.created: list[SimSandbox] = []
        self.keep_refs = False

    async def create(self, task: Task) -> Sandbox:
        await _pause(self.profile.create.sample(self.rng))
        box = SimSandbox(self, {**task.files, **task.visible_checks})
        if self.keep_refs:
            self.created.append(box)
        return box


_OK = Observation(text="ok")  # frozen, so one instance serves every step


class SimEnv(Environment):
    """A minimal environment over a `SimSandbox` for scale simulations: each step is one exec.

    It skips tool parsing on purpose: what the simulation measures is the pool's scheduling, not text
    processing. A dead sandbox ends the episode with an `EpisodeEnd` error, like `ToolEnv`.
    """

    def __init__(self, sandbox: Sandbox | None, on_exec: Callable[[float], None]) -> None:
        self.sandbox = sandbox
        self.on_exec = on_exec
        self.error: ErrorInfo | None = None

    async def reset(self, task: Task) -> Observation:
        return Observation(text=task.prompt)

    async def step(self, action: str) -> Observation:
        assert self.sandbox is not None
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            await self.sandbox.exec(action)
        except SandboxError as e:
            self.error = e.info()
            return Observation(text="", done=True, end=EpisodeEnd(finish_reason="error", error=self.error))
        self.on_exec(loop.time() - t0)
        return _OK

    async def close(self) -> None:
        return None


def sim_env_factory(
    task: Task, sandbox: Sandbox | None, snapshot: str | None, on_exec: Callable[[float], None]
) -> SimEnv:
    return SimEnv(sandbox, on_exec)
