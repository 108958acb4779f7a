"""The Ray backend on a local cluster: same interface, killed workers become env errors, nothing leaks."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from poolkit import make_task
from reward_helpers import error_of, reward_of, verdict_of

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.pool import EnvPool, PoolConfig
from trialground.pool.ray_backend import RayBackend, RaySandbox, start_ray
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.grader import Grader, make_grader

ray = pytest.importorskip("ray")
HIDDEN = "from solution import add\n\n\ndef test_a():\n    assert add(2, 3) == 5\n"
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    start_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def make_pool(sandbox_config: SandboxConfig, grader: Grader) -> EnvPool:
    config = PoolConfig(backend="ray", max_active=4, ray_workers=2, ray_worker_cpus=0.5)
    return EnvPool(config, env_config=EnvConfig(kind="tool"), sandbox_config=sandbox_config, grader=grader)


def leftovers(roots: list[str]) -> list[str]:
    """Directories, mounts and processes (by command line) still referring to the workers' roots."""
    found = [r for r in roots if os.path.exists(r)]
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    found += [ln for ln in mountinfo if any(r in ln for r in roots)]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            found += [f"pid {entry}: {cmd[:80]}" for r in roots if r in cmd]
    return found


async def test_ray_episode_graded_and_worker_kill_is_env_error() -> None:
    sandbox_config = SandboxConfig()
    grader = make_grader(sandbox_config)
    pool = make_pool(sandbox_config, grader)
    task = Task(
        domain="code",
        prompt="write add",
        files={"solution.py": "def add(a, b):\n    return 0\n"},
        hidden_checks={"test_h.py": HIDDEN},
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
    )
    try:
        await pool.start()
        backend = pool.backend
        assert isinstance(backend, RayBackend) and len(backend.workers) == 2
        roots = [w.root for w in backend.workers]
        # a full episode through Ray, graded by the driver's grader reading the remote workspace
        async with pool.lease(task) as env:
            assert isinstance(env, ToolEnv) and isinstance(env.sandbox, RaySandbox)
            await env.reset(task)
            fix = "def add(a, b):\n    return a + b\n"
            await env.step(format_tool_call("write_file", {"path": "solution.py", "content": fix}))
            obs = await env.step(format_tool_call("submit", {}))
            assert verdict_of(obs) is not None and verdict_of(obs).passed and verdict_of(obs).error is None
        # two episodes on different workers; kill one worker mid-episode
        t1, t2 = make_task(1), make_task(2)
        e1, e2 = await pool.acquire(t1), await pool.acquire(t2)
        assert isinstance(e1, ToolEnv) and isinstance(e2, ToolEnv)
        for env, t in ((e1, t1), (e2, t2)):
            await env.reset(t)
        s1, s2 = e1.sandbox, e2.sandbox
        assert isinstance(s1, RaySandbox) and isinstance(s2, RaySandbox) and s1.worker is not s2.worker
        ray.kill(s1.worker.handle)
        bash = format_tool_call("bash", {"command": "cat a.txt"})
        o1, o2 = await asyncio.gather(e1.step(bash), e2.step(bash))
        assert o1.done and reward_of(o1) is None and error_of(o1).kind == "worker_lost"
        assert error_of(o1).boundary == "sandbox"
        assert o2.text == "[exit 0]\ncontent 2" and not o2.done
        await pool.release(e1)
        await pool.release(e2)
        # the replacement worker comes up: a Ray actor start (a new Python process importing the sandbox
        # modules) takes seconds on a busy machine, so the wait allows minutes, not seconds
        deadline = time.monotonic() + 150
        while len(backend.workers) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(backend.workers) == 2 and backend.lost == 1
        roots += [w.root for w in backend.workers if w.root not in roots]
        m = pool.metrics()
        assert m["pool/failures/worker_lost"] == 1 and m["pool/ray/workers"] == 2
        # capacity is back: four concurrent episodes run
        envs = [await pool.acquire(make_task(i)) for i in range(4)]
        for i, env in enumerate(envs):
            await env.reset(make_task(i))
        outs = await asyncio.gather(*(env.step(bash) for env in envs))
        assert [o.text for o in outs] == [f"[exit 0]\ncontent {i}" for i in range(4)]
        for env in envs:
            await pool.release(env)
    finally:
        await pool.close()
        await grader.close()
    assert leftovers(roots) == []


async def test_concurrent_first_acquires_all_wait_for_the_workers() -> None:
    """Every first acquire of a fresh pool starts the backend; none may run ahead of the workers' start
    (an evaluation's first batch once got 'no sandbox workers' for all but one task)."""
    sandbox_config = SandboxConfig()
    grader = make_grader(sandbox_config)
    config = PoolConfig(backend="ray", max_active=12, ray_workers=2, ray_worker_cpus=0.5)
    pool = EnvPool(config, env_config=EnvConfig(kind="tool"), sandbox_config=sandbox_config, grader=grader)
    try:
        envs = await asyncio.gather(*(pool.acquire(make_task(i)) for i in range(12)))
        assert all(isinstance(e, ToolEnv) and isinstance(e.sandbox, RaySandbox) for e in envs)
        assert "pool/failures/create" not in pool.metrics()
        for e in envs:
            await pool.release(e)
    finally:
        await pool.close()
        await grader.close()
