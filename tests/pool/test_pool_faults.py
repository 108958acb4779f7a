"""Faults are data, with real bwrap sandboxes: a sandbox killed mid-episode fails only its own episode,
its slot is replaced, and nothing leaks (processes, mounts, workspace directories)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from poolkit import make_task
from reward_helpers import error_of, reward_of

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.pool import EnvPool, LocalBackend, PoolConfig
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task
from trialground.verify.grader import make_grader


class RecordingBackend(LocalBackend):
    """The real local backend, remembering what it made so the test can look for leftovers."""

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.roots: list[Path] = []

    async def create(self, task: Task) -> Sandbox:
        box = await super().create(task)
        self.roots.append(Path(box.workspace.root))  # type: ignore[attr-defined]
        return box


def child_pids() -> set[int]:
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.add(int(entry))
    return out


def mounts_under(roots: list[Path]) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line for line in text.splitlines() if any(str(r) in line for r in roots)]


BASH = format_tool_call("bash", {"command": "echo alive"})


def test_killed_sandbox_is_episode_error_others_go_on_nothing_leaks() -> None:
    """Run on its own loop, checked after the loop is gone (the sandbox layer's spares live as long as it)."""
    sandbox_config = SandboxConfig()
    # The fork server's template lives as long as this process, whichever test starts it first: start it
    # before counting, so what is counted is what the episodes leave.
    asyncio.run(_open_and_close(sandbox_config))
    before = child_pids()
    backend = RecordingBackend(sandbox_config)
    asyncio.run(episodes(sandbox_config, backend))
    assert len(backend.roots) == 4
    left = child_pids() - before
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left]
    assert mounts_under(backend.roots) == []
    assert [r for r in backend.roots if r.exists()] == []


async def _open_and_close(config: SandboxConfig) -> None:
    async with await open_sandbox(config) as box:
        assert (await box.exec(["true"])).ok


async def episodes(sandbox_config: SandboxConfig, backend: RecordingBackend) -> None:
    grader = make_grader(sandbox_config)
    pool = EnvPool(
        PoolConfig(max_active=3), env_config=EnvConfig(kind="tool"), sandbox_config=sandbox_config,
        grader=grader, backend=backend,
    )  # fmt: skip
    tasks = [make_task(i) for i in range(3)]
    try:
        envs = [await pool.acquire(t) for t in tasks]
        for env, t in zip(envs, tasks, strict=True):
            await env.reset(t)
            assert (await env.step(BASH)).text == "[exit 0]\nalive"
        victim = envs[1]
        assert isinstance(victim, ToolEnv)
        os.kill(victim.sandbox._proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
        results = await asyncio.gather(*(env.step(BASH) for env in envs))
        assert results[1].done and error_of(results[1]).boundary == "sandbox"
        assert error_of(results[1]).kind == "sandbox_died" and reward_of(results[1]) is None
        assert [r.text for i, r in enumerate(results) if i != 1] == ["[exit 0]\nalive"] * 2
        for env in envs:
            await pool.release(env)
        m = pool.metrics()
        assert m["pool/failures/sandbox_died"] == 1 and m["pool/recycled"] == 1
        assert m["pool/idle"] == 2 and m["pool/active"] == 0
        # capacity is back: all three tasks run again, the victim's on a fresh sandbox
        again = [await pool.acquire(t) for t in tasks]
        for env, t in zip(again, tasks, strict=True):
            await env.reset(t)
            obs = await env.step(format_tool_call("bash", {"command": "cat a.txt"}))
            assert obs.text == f"[exit 0]\ncontent {tasks.index(t)}"
            await pool.release(env)
        assert pool.metrics()["pool/created"] == 4
    finally:
        await pool.close()
        await grader.close()


async def test_a_host_view_unmounted_under_an_episode_is_an_infrastructure_error() -> None:
    """The overlay at an episode's workspace path detached from outside (a foreign mount namespace's detach
    propagated through the shared mount): the episode ends as a sandbox error that the rollout starts
    again on a fresh environment, never a reading of the workspace as empty; the pool's next episode on
    that task sees its files."""
    from trialground.rollout.agent import LOST_ENV_KINDS
    from trialground.sandbox import mounts

    sandbox_config = SandboxConfig()
    grader = make_grader(sandbox_config)
    pool = EnvPool(
        PoolConfig(max_active=2), env_config=EnvConfig(kind="tool"), sandbox_config=sandbox_config,
        grader=grader,
    )  # fmt: skip
    task = make_task(7)
    read = format_tool_call("read_file", {"path": "a.txt"})
    try:
        env = await pool.acquire(task)
        await env.reset(task)
        assert isinstance(env, ToolEnv)
        assert "content 7" in (await env.step(read)).text
        workspace = env.sandbox.workspace  # type: ignore[attr-defined]
        if not workspace.mounted:
            pytest.skip("no overlay here (not root): nothing can be unmounted")
        mounts.umount(workspace.ws)  # our own mount, as a foreign namespace's detach leaves it
        out = await env.step(read)
        assert out.done and reward_of(out) is None and error_of(out).boundary == "sandbox"
        assert error_of(out).kind == "workspace_lost" and "workspace_lost" in LOST_ENV_KINDS
        await pool.release(env)
        again = await pool.acquire(task)
        await again.reset(task)
        assert "content 7" in (await again.step(read)).text
        await pool.release(again)
    finally:
        await pool.close()
        await grader.close()
