"""Batching the generations of concurrent episodes into shared `policy.generate` calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from trialground.microbatch import Batcher
from trialground.policy.base import Generation, SamplingParams

Request = tuple[list[int], SamplingParams]


class GroupBatcher:
    """Stands in for a policy for `live` concurrent episodes, one prompt per request.

    Requests are held until every live episode is waiting on the policy -- then they go out as one
    `generate` call per distinct `SamplingParams` -- or until `window_s` after the first held request, so
    an episode busy in a slow environment does not stall the others. `episode_done()` lowers `live`.
    A failed call fails exactly the requests that were in it. The queueing is `trialground.microbatch`'s
    (a batch is full when it holds `live` requests). `on_generation(seconds, sequences)` is told every
    call's duration and size (the environment pool's autoscaler sizes itself from it).

    With a policy that streams (`streams` and `generate_streaming`: the in-process HF policy with
    `policy.stream`, the default), each request returns as
    soon as its own row finishes, not when the call's longest row does: an episode grades or runs its
    tool call while the rest of the batch still decodes.

    A policy that takes concurrent calls (`concurrent`: a fleet of inference servers, each batching on its
    own) is not batched here at all: each episode's request goes out the moment the episode is ready (its
    tool returned), as its own call, and comes back when its own answer does.
    """

    def __init__(
        self,
        policy: Any,
        *,
        live: int,
        window_s: float = 0.01,
        on_generation: Callable[[float, int], None] | None = None,
    ) -> None:
        self.policy = policy
        self._direct = getattr(policy, "concurrent", False) is True
        self._direct_calls = 0
        self._on_generation = on_generation
        self._streams = getattr(policy, "streams", False) is True
        self._batcher: Batcher[Request, Generation] = Batcher(
            self._generate_streaming if self._streams else self._generate,
            max_batch=max(1, live),
            window_s=window_s,
            key=lambda r: r[1].model_dump_json(),
            on_batch=on_generation,
            streaming=self._streams,
        )
        self.live = live

    @property
    def calls(self) -> int:
        """generate calls made, for tests and metrics."""
        return self._batcher.calls + self._direct_calls

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def version(self) -> int:
        return int(self.policy.version)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if self._direct:
            self._direct_calls += 1
            t0 = time.perf_counter()
            gens = _checked(await self.policy.generate(prompts, params), prompts)
            if self._on_generation is not None:
                self._on_generation(time.perf_counter() - t0, len(prompts))
            return gens
        futures = [self._batcher.enqueue((list(p), params)) for p in prompts]
        return list(await asyncio.gather(*futures))

    def episode_done(self) -> None:
        self.live -= 1
        self._batcher.resize(max(1, self.live))

    async def _generate(self, items: Sequence[Request]) -> list[Generation]:
        return _checked(await self.policy.generate([p for p, _ in items], items[0][1]), items)

    async def _generate_streaming(
        self, items: Sequence[Request], deliver: Callable[[int, Generation], None]
    ) -> list[Generation]:
        gens = await self.policy.generate_streaming([p for p, _ in items], items[0][1], deliver)
        return _checked(gens, items)


def _checked(gens: Sequence[Generation], items: Sequence[Any]) -> list[Generation]:
    if len(gens) != len(items):
        raise RuntimeError(f"policy returned {len(gens)} generations for {len(items)} prompts")
    return list(gens)
