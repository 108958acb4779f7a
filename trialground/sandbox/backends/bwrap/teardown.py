"""Finishing closed sandboxes in the background.

Closing a bubblewrap sandbox kills it at once (SIGKILL to bubblewrap takes the sandbox's PID namespace, and
so every process in it, down) and leaves the rest to a task of the event loop: reaping bubblewrap, waiting
for the cgroup to empty and removing it, unmounting and deleting the workspace. The caller of `close` does
not wait for that, so a fresh sandbox's open + exec + close costs what the sandbox did, not its cleanup.

Nothing leaks: at most MAX_PENDING teardowns are pending per process (a close beyond that waits for its
own); a teardown that is cancelled (the loop is shutting down) finishes synchronously; teardowns a closed
loop never ran are finished synchronously at the next close, or at interpreter exit. `drain()` waits until
the current loop has none pending.
"""

from __future__ import annotations

import asyncio
import atexit
import os
from collections.abc import Coroutine
from typing import Any, Protocol

MAX_PENDING = 8


class Closable(Protocol):
    def close_now(self) -> None:
        """Finish closing synchronously (idempotent)."""


_PENDING: dict[Closable, asyncio.Task[None]] = {}  # strong references until each teardown is done


async def defer(owner: Closable, work: Coroutine[Any, Any, None]) -> None:
    """Run `work`, the rest of closing `owner`, in the background (it must free everything even when
    cancelled); returns at once unless too many teardowns are already pending."""
    for stale, left in list(_PENDING.items()):  # left by a loop that closed without running them
        if left.get_loop().is_closed():
            _PENDING.pop(stale, None)
            stale.close_now()
    task = asyncio.get_running_loop().create_task(work, name="trialground-sandbox-teardown")
    _PENDING[owner] = task
    task.add_done_callback(lambda _task: _PENDING.pop(owner, None))
    if len(_PENDING) > MAX_PENDING:
        await asyncio.shield(task)


def pending() -> int:
    return len(_PENDING)


async def drain() -> None:
    """Wait for every teardown of the running loop to finish."""
    loop = asyncio.get_running_loop()
    while tasks := [t for t in _PENDING.values() if t.get_loop() is loop]:
        await asyncio.gather(*tasks, return_exceptions=True)


@atexit.register
def _finish_at_exit() -> None:
    for owner in list(_PENDING):
        owner.close_now()
    _PENDING.clear()


# A forked copy of us (multiprocessing, a trainer's own fork) must not finish the parent's sandboxes when
# it exits: they are the parent's.
os.register_at_fork(after_in_child=_PENDING.clear)
