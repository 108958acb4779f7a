"""Streaming generation: a row that finishes early is handed over before its batch's longest row ends
(`sample_batch(on_done=...)`, `HFPolicy.generate_streaming`, `GroupBatcher` over them), with exactly the
tokens the whole batch returns."""

from __future__ import annotations

import asyncio

from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import Generation, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.rollout.generation_batcher import GroupBatcher

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=48, seed=11)


def _prompts(tiny: HFPolicy, n: int) -> list[list[int]]:
    tasks = generate_codegen_tasks(n, seed=5, split="eval")
    return [tiny.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks for _ in range(4)]


def test_rows_finishing_early_are_reported_once_with_their_final_tokens(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 4)
    early: list[tuple[int, Generation]] = []
    gens = tiny.generate_sync(prompts, PARAMS, lambda i, g: early.append((i, g)))
    rows = [i for i, _ in early]
    assert len(rows) == len(set(rows))  # each at most once
    assert 0 < len(rows) < len(prompts)  # some finished early, the last ones with the batch
    for i, g in early:
        assert g == gens[i]
        assert g.finish_reason == "eos"
    longest = max(len(g.token_ids) for g in gens)
    assert all(len(g.token_ids) < longest for _, g in early)
    assert tiny.generate_sync(prompts, PARAMS) == gens  # the callback changes nothing sampled


async def test_an_episode_gets_its_generation_before_the_batch_call_returns() -> None:
    tiny = HFPolicy(PolicyConfig(model="tiny", stream=True))
    prompts = _prompts(tiny, 4)
    returned: list[float] = []  # set when the batch's generate call returned
    batcher = GroupBatcher(tiny, live=len(prompts), on_generation=lambda s, n: returned.append(s))
    before_return: list[bool] = []

    async def episode(prompt: list[int]) -> Generation:
        (gen,) = await batcher.generate([prompt], PARAMS)
        before_return.append(not returned)
        return gen

    gens = await asyncio.gather(*(episode(p) for p in prompts))
    assert batcher.calls == 1
    assert any(before_return) and not all(before_return)
    assert gens == tiny.generate_sync(prompts, PARAMS)


async def test_by_default_every_episode_waits_for_the_whole_batch() -> None:
    policy = HFPolicy(PolicyConfig(model="tiny"))
    prompts = _prompts(policy, 4)
    returned: list[float] = []
    batcher = GroupBatcher(policy, live=len(prompts), on_generation=lambda s, n: returned.append(s))

    async def episode(prompt: list[int]) -> bool:
        await batcher.generate([prompt], PARAMS)
        return bool(returned)

    assert all(await asyncio.gather(*(episode(p) for p in prompts)))
