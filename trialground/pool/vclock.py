"""An asyncio event loop on virtual time, for simulating the pool at scale.

`VirtualClockLoop.time()` is a counter that jumps straight to the next scheduled timer whenever no
callback is ready, so ``await asyncio.sleep(30)`` returns at once while every timeout, lease and latency
keeps its order and duration on the virtual clock. Real I/O still works (the selector is polled without
blocking), but nothing should wait on real I/O under it. Use `run_virtual(coro)`.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _NonBlockingSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0 and self.loop is not None:
            self.loop.advance(timeout)  # nothing to do until the next timer: jump to it
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _NonBlockingSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh `VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
