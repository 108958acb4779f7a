"""Micro-batching of concurrent gradings: callers await one item, the batcher runs many per sandbox exec.

A grading joins the open batch; the batch is dispatched when it holds `max_batch` items or
`window_s` after its first item arrived, whichever comes first. `run_batch` returns one result per item
(a value, or an exception that is raised to that item's caller only): one bad item never fails its
siblings. Batching never delays a lone caller by more than `window_s`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    def __init__(
        self,
        run_batch: Callable[[Sequence[Item]], Awaitable[Sequence[Result | BaseException]]],
        *,
        max_batch: int,
        window_s: float,
    ) -> None:
        self._run_batch, self.max_batch, self.window_s = run_batch, max_batch, window_s
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._dispatch(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _dispatch(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = await self._run_batch([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"batch of {len(batch)} returned {len(results)} results")
        except BaseException as e:  # the whole batch failed: every caller sees the error
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
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
