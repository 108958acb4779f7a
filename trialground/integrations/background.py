"""One asyncio event loop in a daemon thread, for synchronous callers of trialground's async grading.

Trainers such as TRL call reward functions and tool methods synchronously. trialground's `Grader` and its
sandboxes belong to the event loop that first used them, so every call from such a trainer is run on one
persistent loop owned by this object: the grader's warm sandboxes and batcher survive between calls, and a
call costs what it costs inside trialground's own loop (no per-call loop or sandbox set-up).

Contract: `run(coro)` blocks until the coroutine finishes on the loop and returns its result (or raises
its exception); it must not be called from the loop's own thread. `close()` runs the given async clean-ups,
closes the loop's async generators (what `asyncio.run` does) and stops the thread; later `run` calls raise
`RuntimeError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """See the module docstring. Thread-safe: several threads may `run` at once."""

    def __init__(self, name: str = "trialground-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the trialground background loop is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("BackgroundLoop.run called from its own loop thread (it would deadlock)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self, *cleanups: Callable[[], Awaitable[Any]]) -> None:
        """Run `cleanups` (in order, errors ignored so the rest still run), then stop the loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True

        async def finish() -> None:
            for cleanup in cleanups:
                # a failed clean-up must not keep the others (or the loop) alive
                with contextlib.suppress(Exception):
                    await cleanup()
            await self.loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(finish(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
