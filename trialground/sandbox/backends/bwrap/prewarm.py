"""Sandboxes started ahead of need, so `open_sandbox` in a busy loop costs about as much as a warm exec.

A pool is per event loop (asyncio processes belong to their loop) and per `SandboxConfig`. It only fills
once a config has been opened twice in the same loop, so one-off sandboxes (a test, a CLI run) never pay
for a spare. Every pooled sandbox is brand new: new namespaces, empty workspace, never run anything.
Pools of loops that have closed, and everything still open when the interpreter exits, are cleaned up
synchronously (processes killed, mounts and cgroups removed).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from trialground.sandbox.backends.bwrap import teardown
from trialground.sandbox.base import SandboxConfig


class Spare(Protocol):
    """What the pool keeps of a sandbox started ahead (a `BwrapSandbox`)."""

    def alive(self) -> bool: ...

    def close_now(self) -> None: ...

    async def close(self) -> None: ...


Factory = Callable[[SandboxConfig], Awaitable[Spare]]


class _LoopPool:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.ready: dict[SandboxConfig, list[Spare]] = {}
        self.opened: dict[SandboxConfig, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.guard_gen: AsyncIterator[None] | None = None

    def dead(self) -> bool:
        loop = self.loop()
        return loop is None or loop.is_closed()

    async def guard(self) -> AsyncIterator[None]:
        """Suspended for the loop's life; the loop's shutdown (`shutdown_asyncgens`, which asyncio.run and
        pytest-asyncio call) closes it, and the spares are closed while the loop still runs."""
        try:
            yield
        finally:
            tasks = list(self.tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # their half-made sandboxes close too
            spares = [sb for sandboxes in self.ready.values() for sb in sandboxes]
            self.ready.clear()
            await asyncio.gather(*(sb.close() for sb in spares), return_exceptions=True)
            await teardown.drain()  # the loop is about to close: finish their teardowns now

    def discard_all(self) -> None:
        for sandboxes in self.ready.values():
            for sb in sandboxes:
                sb.close_now()
        self.ready.clear()


_pools: dict[int, _LoopPool] = {}
LIVE: weakref.WeakSet[Spare] = weakref.WeakSet()  # every open bwrap sandbox, for the exit hook


async def _pool() -> _LoopPool:
    loop = asyncio.get_running_loop()
    for key in [k for k, p in _pools.items() if p.dead()]:
        _pools.pop(key).discard_all()
    pool = _pools.get(id(loop))
    if pool is None or pool.loop() is not loop:
        pool = _pools[id(loop)] = _LoopPool(loop)
        pool.guard_gen = pool.guard()
        await anext(pool.guard_gen)
    return pool


async def take(config: SandboxConfig, factory: Factory) -> Spare | None:
    """A ready sandbox for `config` if one is pooled; (re)fills the pool in the background."""
    if config.prewarm == 0 or not config.warm:
        return None
    pool = await _pool()
    pool.opened[config] = pool.opened.get(config, 0) + 1
    ready = pool.ready.setdefault(config, [])
    name = f"trialground-prewarm-{hash(config)}"
    filling = [t for t in pool.tasks if t.get_name() == name]
    sandbox = _claim(ready)
    if sandbox is None and filling:
        # A spare is already starting: it is ready sooner than a sandbox we would start now.
        await asyncio.wait(filling, return_when=asyncio.FIRST_COMPLETED)
        sandbox = _claim(ready)
    if pool.opened[config] >= 2:
        filling = [t for t in pool.tasks if t.get_name() == name and not t.done()]
        for _ in range(max(0, config.prewarm - len(ready) - len(filling))):
            task = asyncio.create_task(_fill(pool, config, factory), name=name)
            pool.tasks.add(task)
            task.add_done_callback(pool.tasks.discard)
    return sandbox


def _claim(ready: list[Spare]) -> Spare | None:
    while ready:
        candidate = ready.pop()
        if candidate.alive():
            return candidate
        candidate.close_now()
    return None


async def _fill(pool: _LoopPool, config: SandboxConfig, factory: Factory) -> None:
    try:
        sandbox = await factory(config)
    except Exception:  # a failed spare is not an error of anyone's: the next open starts its own
        return
    pool.ready.setdefault(config, []).append(sandbox)


@atexit.register
def _cleanup_at_exit() -> None:
    for pool in list(_pools.values()):
        pool.discard_all()
    for sandbox in list(LIVE):
        try:
            sandbox.close_now()
        except Exception as exc:  # the interpreter is exiting: say what is left behind, free the rest
            print(f"trialground: a sandbox was not freed at exit: {exc}", file=sys.stderr)


def _forget_parents_sandboxes() -> None:
    """In a forked copy of us: the pools and open sandboxes are the parent's; exiting must not close them
    (it would kill the parent's sandboxes and delete their workspaces)."""
    _pools.clear()
    LIVE.clear()


os.register_at_fork(after_in_child=_forget_parents_sandboxes)
