"""Bounded concurrency with a FIFO wait queue: the pool's admission control.

`CapacityGate` hands out `limit` units. `try_acquire` is the O(1) fast path; `wait` queues the caller
(FIFO) unless `max_queue` callers already wait (`PoolFull`: backpressure, fail fast) and gives up after
`timeout` seconds (`AcquireTimeout`). `release` hands the unit straight to the oldest live waiter, so a
freed slot never idles while someone waits. `resize` admits waiters at once when the limit grows; when it
shrinks, units are dropped as they come back. Cancelled or timed-out waiters are skipped lazily, so every
operation is amortised O(1) and a timeout costs one timer (O(log n) in the loop's heap).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from trialground.errors import EnvError


class PoolFull(EnvError):
    """The wait queue is full: back off and retry later."""


class AcquireTimeout(EnvError):
    """No environment became free within the timeout."""


def _now() -> float:
    try:
        return asyncio.get_running_loop().time()  # virtual time in simulations
    except RuntimeError:
        return time.monotonic()


class QueueDepth:
    """The wait queue's depth over the last `window_s` seconds, recorded where it changes (read between
    steps, the instantaneous depth is almost always 0): time-weighted mean and peak."""

    def __init__(self, window_s: float = 60.0, keep: int = 100_000) -> None:
        self.window_s = window_s
        self.value = 0
        self._changes: deque[tuple[float, int]] = deque(maxlen=keep)  # (time, depth from then on)

    def set(self, value: int) -> None:
        if value != self.value:
            self.value = value
            self._changes.append((_now(), value))

    def stats(self) -> tuple[float, float]:
        """(time-weighted mean, peak) over the window."""
        now = _now()
        start = now - self.window_s
        while len(self._changes) > 1 and self._changes[1][0] <= start:
            self._changes.popleft()
        area, peak, t, depth = 0.0, float(self.value), start, 0
        for when, value in self._changes:
            if when > start:
                area += depth * (when - t)
                peak = max(peak, float(depth))
                t = when
            depth = value
        area += depth * (now - t)
        peak = max(peak, float(depth))
        return area / max(now - start, 1e-9), peak


class CapacityGate:
    def __init__(self, limit: int, max_queue: int, on_fail: Callable[[str], None] | None = None) -> None:
        self.limit = max(1, limit)
        self.max_queue = max_queue
        self.active = 0  # units held
        self.depth = QueueDepth()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._on_fail = on_fail or (lambda kind: None)

    @property
    def waiting(self) -> int:
        """Live waiters (the deque may also hold dead ones, skipped lazily)."""
        return self.depth.value

    @waiting.setter
    def waiting(self, value: int) -> None:
        self.depth.set(value)

    def try_acquire(self) -> bool:
        if self.active < self.limit and self.waiting == 0:
            self.active += 1
            return True
        return False

    async def wait(self, timeout: float) -> None:
        """Queue for a unit; on return the caller holds one."""
        if self.waiting >= self.max_queue:
            self._on_fail("pool_full")
            raise PoolFull(
                f"pool full: {self.active} active, {self.waiting} waiting (max_queue {self.max_queue}); "
                "back off and retry",
                kind="pool_full",
            )
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        self.waiting += 1
        timer = loop.call_later(timeout, self._expire, fut)
        try:
            await fut
        except TimeoutError:
            self._on_fail("acquire_timeout")
            raise AcquireTimeout(
                f"no environment free within {timeout:.3g}s", kind="acquire_timeout"
            ) from None
        except asyncio.CancelledError:
            if not fut.done():
                fut.cancel()
            if fut.cancelled():  # neither granted nor expired: it still counted as a live waiter
                self.waiting -= 1
            elif fut.exception() is None:
                self.release()  # a unit was granted just as the caller gave up
            raise
        finally:
            timer.cancel()

    def _expire(self, fut: asyncio.Future[None]) -> None:
        if not fut.done():
            fut.set_exception(TimeoutError())
            self.waiting -= 1

    def _grant_next(self) -> bool:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                self.waiting -= 1
                fut.set_result(None)
                return True
        return False

    def release(self) -> None:
        """Return a unit: to the oldest waiter, or to the free count (dropped when over the limit)."""
        if self.active > self.limit or not self._grant_next():
            self.active -= 1

    def resize(self, limit: int) -> None:
        self.limit = max(1, limit)
        while self.active < self.limit and self.waiting:
            self.active += 1
            self._grant_next()

    def close(self, error: Exception) -> None:
        """Fail every waiter with `error`."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(error)
        self.waiting = 0
