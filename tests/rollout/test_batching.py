"""GroupBatcher: requests of concurrent episodes become shared generate calls; failures stay in their call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from trialground.errors import PolicyError
from trialground.policy.base import Generation, SamplingParams
from trialground.rollout.generation_batcher import GroupBatcher


class Echo:
    """A generator that returns each prompt's last token + 1; prompts starting with 666 fail the call."""

    version = 3
    tokenizer = None

    def __init__(self) -> None:
        self.calls: list[tuple[list[list[int]], SamplingParams]] = []

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        self.calls.append(([list(p) for p in prompts], params))
        await asyncio.sleep(0)
        if any(p[0] == 666 for p in prompts):
            raise PolicyError("bad batch")
        return [
            Generation(
                token_ids=(p[-1] + 1,), logprobs=(-0.5,), text="", finish_reason="eos", version=self.version
            )
            for p in prompts
        ]


P = SamplingParams(max_new_tokens=4)


async def test_all_live_waiting_is_one_call_in_order() -> None:
    echo = Echo()
    batcher = GroupBatcher(echo, live=3, window_s=10.0)
    outs = await asyncio.gather(*(batcher.generate([[i, 10 * i]], P) for i in range(3)))
    assert [o[0].token_ids for o in outs] == [(1,), (11,), (21,)]
    assert len(echo.calls) == 1 and echo.calls[0][0] == [[0, 0], [1, 10], [2, 20]]
    assert batcher.version == 3


async def test_window_flushes_without_stragglers_and_done_episodes_lower_live() -> None:
    echo = Echo()
    batcher = GroupBatcher(echo, live=3, window_s=0.01)
    out = await batcher.generate([[1]], P)  # the other two never ask: the window sends it alone
    assert out[0].token_ids == (2,) and len(echo.calls) == 1
    batcher.episode_done()
    batcher.episode_done()
    assert (await batcher.generate([[5]], P))[0].token_ids == (6,)  # live=1: sent at once


async def test_distinct_params_are_separate_calls() -> None:
    echo = Echo()
    batcher = GroupBatcher(echo, live=2, window_s=10.0)
    other = SamplingParams(max_new_tokens=2)
    await asyncio.gather(batcher.generate([[1]], P), batcher.generate([[2]], other))
    assert sorted(c[1].max_new_tokens for c in echo.calls) == [2, 4]


async def test_a_failed_call_fails_only_its_requests() -> None:
    echo = Echo()
    batcher = GroupBatcher(echo, live=2, window_s=10.0)
    other = SamplingParams(max_new_tokens=2)
    bad, good = await asyncio.gather(
        batcher.generate([[666]], P), batcher.generate([[7]], other), return_exceptions=True
    )
    assert isinstance(bad, PolicyError)
    assert not isinstance(good, BaseException) and good[0].token_ids == (8,)


async def test_wrong_count_is_an_error() -> None:
    class Short(Echo):
        async def generate(
            self, prompts: Sequence[Sequence[int]], params: SamplingParams
        ) -> list[Generation]:
            return (await super().generate(prompts, params))[:-1]

    batcher = GroupBatcher(Short(), live=2, window_s=10.0)
    with pytest.raises(RuntimeError, match="returned 1 generations for 2 prompts"):
        await asyncio.gather(batcher.generate([[1]], P), batcher.generate([[2]], P))


async def test_a_streaming_batcher_delivers_early_and_holds_the_next_batch_behind_the_running_call() -> None:
    from trialground.microbatch import Batcher

    release = asyncio.Event()
    calls: list[list[str]] = []

    async def run(items: Sequence[str], deliver) -> list[str]:  # type: ignore[no-untyped-def]
        calls.append(list(items))
        deliver(0, f"{items[0]}!")  # the first item's result is ready before the call ends
        await release.wait()
        return [f"{i}." for i in items]

    batcher: Batcher[str, str] = Batcher(run, max_batch=3, window_s=0.01, streaming=True)
    first = [batcher.enqueue(x) for x in ("a", "b", "c")]
    assert await first[0] == "a!"  # served while the call still runs
    again = batcher.enqueue("a2")  # its episode's next request
    late = batcher.enqueue("d")
    await asyncio.sleep(0.1)  # both windows ended: they wait for the running call, not a call each
    assert len(calls) == 1 and not again.done()
    release.set()
    assert [await f for f in first] == ["a!", "b.", "c."]
    assert await again == "a2!" and await late == "d."
    assert calls == [["a", "b", "c"], ["a2", "d"]]
    await batcher.close()
