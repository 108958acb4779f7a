"""Micro-batching: concurrent callers await one item each; the batcher runs many in one call.

The one implementation behind both batched paths of a run: the grader's single-turn code gradings (many
per sandbox exec, `trialground.verify.grader`) and the episodes' generation requests (many per
`policy.generate`, `trialground.rollout.generation_batcher.GroupBatcher`).

Contract:
- An item joins the open batch. The batch is dispatched as soon as it holds `max_batch` items, or
  `window_s` after its first item arrived, whichever comes first; lowering `max_batch` (`resize`) to or
  below the number waiting dispatches at once. Batching never delays a lone caller by more than `window_s`.
- A dispatched batch is split by `key(item)` (items of different keys never share a call); each part is
  one `run_batch` call, in arrival order.
- `run_batch` returns one result per item, a value or an exception raised to that item's caller only: one
  bad item never fails its siblings. If `run_batch` itself raises (or returns the wrong number of results)
  every caller of that call gets the error; other calls are unaffected.
- With `even=True`, a batch that reached `max_batch` goes out at the end of the event-loop turn instead of
  at once, together with whatever else arrived in that turn, cut into the fewest parts of at most
  `max_batch` items and of equal size (give or take one): 19 items at `max_batch` 16 are calls of 10 and 9,
  not 16 and 3, so calls that run side by side (the grader's sandbox execs on several cores) end together.
- `on_batch(seconds, size)`, when given, is told the duration and size of every call that returned.
- With `streaming=True`, `run_batch(items, deliver)` may call `deliver(index, result)` (on the event loop)
  to hand one item's result to its caller before the call returns; what it returns at the end is then
  ignored for the items already delivered. A caller served early may come back with its next item while
  the call still runs: its window then lasts until no call is running (or the batch is full), so the
  items that arrive meanwhile go out together instead of as calls of one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    def __init__(
        self,
        run_batch: Callable[..., Awaitable[Sequence[Result | BaseException]]],
        *,
        max_batch: int,
        window_s: float,
        key: Callable[[Item], Hashable] | None = None,
        on_batch: Callable[[float, int], None] | None = None,
        streaming: bool = False,
        even: bool = False,
    ) -> None:
        self._run_batch: Callable[..., Awaitable[Sequence[Result | BaseException]]] = run_batch
        self.max_batch, self.window_s = max_batch, window_s
        self._key, self._on_batch, self._streaming, self._even = key, on_batch, streaming, even
        self._full: asyncio.Handle | None = None  # the end-of-turn flush of a full batch (`even`)
        self.calls = 0  # run_batch calls made (metrics, tests)
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = 0  # run_batch calls in flight

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def enqueue(self, item: Item) -> asyncio.Future[Result]:
        """Add `item` and return the future of its result (for callers that submit several at once)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            if not self._even:
                self._flush()
            elif self._full is None:
                self._full = loop.call_soon(self._flush)
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._window_ended)
        return future

    async def submit(self, item: Item) -> Result:
        return await self.enqueue(item)

    def resize(self, max_batch: int) -> None:
        """Change the batch size; a batch that is now full goes out at once."""
        self.max_batch = max_batch
        if self._pending and len(self._pending) >= max_batch:
            self._flush()

    def _window_ended(self) -> None:
        self._timer = None
        if not (self._streaming and self._running):
            self._flush()
        # else: `_dispatch` flushes what waits when the running calls end

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._full is not None:
            self._full.cancel()
            self._full = None
        batch, self._pending = self._pending, []
        if not batch:
            return
        parts: dict[Hashable, list[tuple[Item, asyncio.Future[Result]]]] = {}
        for entry in batch:
            parts.setdefault(None if self._key is None else self._key(entry[0]), []).append(entry)
        calls = [p for part in parts.values() for p in self._cut(part)]
        for part in calls:
            task = asyncio.get_running_loop().create_task(self._dispatch(part))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _cut(self, part: list[T]) -> list[list[T]]:
        """`part` as one call, or (`even`) as the fewest calls of at most `max_batch`, of equal sizes."""
        n = len(part)
        if not self._even or n <= self.max_batch:
            return [part]
        calls = -(-n // self.max_batch)
        bounds = [n * i // calls for i in range(calls + 1)]
        return [part[a:b] for a, b in itertools.pairwise(bounds)]

    async def _dispatch(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        self.calls += 1
        self._running += 1
        try:
            await self._call(batch)
        finally:
            self._running -= 1
            if self._streaming and not self._running and self._pending and self._timer is None:
                self._flush()  # items that waited out their window behind the running call

    async def _call(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        t0 = time.perf_counter()
        try:
            items = [item for item, _ in batch]
            if self._streaming:

                def deliver(index: int, result: Result) -> None:
                    future = batch[index][1]
                    if not future.done():
                        future.set_result(result)

                results = await self._run_batch(items, deliver)
            else:
                results = await self._run_batch(items)
            if len(results) != len(batch):
                raise RuntimeError(f"batch of {len(batch)} returned {len(results)} results")
        except BaseException as e:  # the whole call failed: each of its callers sees the error
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        if self._on_batch is not None:
            self._on_batch(time.perf_counter() - t0, len(batch))
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue  # the caller went away (cancelled)
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def close(self) -> None:
        self._flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
