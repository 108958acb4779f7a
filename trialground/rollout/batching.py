"""Batching the generations of concurrent episodes into shared `policy.generate` calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from trialground.policy.base import Generation, SamplingParams


class GroupBatcher:
    """Stands in for a policy for `live` concurrent episodes, one prompt per request.

    Requests are held until every live episode is waiting on the policy -- then they go out as one
    `generate` call per distinct `SamplingParams` -- or until `window_s` after the first held request, so
    an episode busy in a slow environment does not stall the others. `episode_done()` lowers `live`.
    A failed call fails exactly the requests that were in it.
    """

    def __init__(self, policy: Any, *, live: int, window_s: float = 0.01) -> None:
        self.policy = policy
        self.live = live
        self.window_s = window_s
        self.calls = 0  # generate calls made, for tests and metrics
        self._pending: list[tuple[list[int], SamplingParams, asyncio.Future[Generation]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def version(self) -> int:
        return int(self.policy.version)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        loop = asyncio.get_running_loop()
        futures = []
        for prompt in prompts:
            fut: asyncio.Future[Generation] = loop.create_future()
            self._pending.append((list(prompt), params, fut))
            futures.append(fut)
        self._maybe_flush()
        if self._pending and self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        return list(await asyncio.gather(*futures))

    def episode_done(self) -> None:
        self.live -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self._pending and len(self._pending) >= self.live:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        by_params: dict[str, list[tuple[list[int], SamplingParams, asyncio.Future[Generation]]]] = {}
        for item in batch:
            by_params.setdefault(item[1].model_dump_json(), []).append(item)
        for items in by_params.values():
            task = asyncio.get_running_loop().create_task(self._call(items))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _call(self, items: list[tuple[list[int], SamplingParams, asyncio.Future[Generation]]]) -> None:
        self.calls += 1
        try:
            gens = await self.policy.generate([p for p, _, _ in items], items[0][1])
            if len(gens) != len(items):
                raise RuntimeError(f"policy returned {len(gens)} generations for {len(items)} prompts")
        except BaseException as exc:  # handed to each waiting episode, which records it
            for _, _, fut in items:
                if not fut.done():
                    fut.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, _, fut), gen in zip(items, gens, strict=True):
            if not fut.done():
                fut.set_result(gen)
