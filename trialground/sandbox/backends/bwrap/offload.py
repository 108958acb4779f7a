"""Blocking host-side work (workspace file access, snapshots) run off the event loop, fork-safe.

`run(fn, *args)` runs `fn` in a worker thread of a pool of our own and awaits its result. Completion is
signalled on a pipe made for that call, not through the loop's own wake-up channel
(`call_soon_threadsafe`, which `run_in_executor` and `asyncio.to_thread` use): a child forked from a
process with live sandboxes that then ends normally closes its copy of the event loop, and that removes
the loop's wake-up socket from the epoll set it shares with the parent, after which the parent would never
hear of a finished thread again. A pipe made after the fork is the parent's alone. The pool is not the
loop's default executor for the same reason (`asyncio.run` shuts that one down in the child).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="trialground-hostio"
)


async def run(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread; its result or its exception. Cancelled, the call still finishes in
    its thread (its result is dropped)."""
    loop = asyncio.get_running_loop()
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append((True, fn(*args)))
        except BaseException as exc:  # handed to the awaiting coroutine, whatever it is
            outcome.append((False, exc))
        finally:
            with contextlib.suppress(OSError):  # the caller was cancelled and closed its end
                os.write(w, b"x")
            os.close(w)

    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(r, lambda: None if done.done() else done.set_result(None))
    try:
        try:
            _POOL.submit(work)
        except BaseException:
            os.close(w)
            raise
        await done
    finally:
        loop.remove_reader(r)
        os.close(r)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
