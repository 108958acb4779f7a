"""HFPolicy on the real tiny model: shapes, the logprob contract, determinism, weight loading, padding."""

from __future__ import annotations

import math

import pytest
import torch

from trialground.errors import PolicyError
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import SamplingParams


def _prompts(policy: HFPolicy, n: int) -> list[list[int]]:
    tasks = generate_codegen_tasks(n, seed=11, split="eval")
    return [policy.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks]


async def test_generation_shapes_and_finish_reasons(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 6)
    gens = await tiny.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=48, seed=0))
    assert len(gens) == 6
    for g in gens:
        assert len(g.token_ids) == len(g.logprobs) >= 1
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in g.logprobs)
        assert g.version == 0
        if g.finish_reason == "eos":
            assert g.token_ids[-1] in tiny.eos_ids
            assert tiny.tokenizer.decode(g.token_ids, skip_special_tokens=True) == g.text
        else:
            assert g.finish_reason == "length" and len(g.token_ids) == 48
    assert any(g.finish_reason == "eos" for g in gens)
    short = await tiny.generate(prompts[:2], SamplingParams(temperature=1.0, max_new_tokens=3, seed=0))
    assert all(g.finish_reason == "length" and len(g.token_ids) == 3 for g in short)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.5])
async def test_sampled_logprobs_match_a_forward_pass(tiny: HFPolicy, temperature: float) -> None:
    prompts = _prompts(tiny, 8)
    gens = await tiny.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=40, seed=5))
    for prompt, g in zip(prompts, gens, strict=True):
        again = tiny.score(prompt, g.token_ids, temperature=temperature)
        assert again == pytest.approx(list(g.logprobs), abs=2e-4)


def test_scoring_runs_the_output_layer_in_chunks(tiny: HFPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    """`score` makes the logits a few positions at a time and gives what the full logits give."""
    from trialground.policy.backends.hf import hf

    prompt, completion = _prompts(tiny, 1)[0], list(range(5, 16))
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = tiny.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / 0.7
    full = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1).tolist()
    seen: list[int] = []
    head = hf.head_logits
    monkeypatch.setattr(hf, "head_logits", lambda m, h: seen.append(len(h)) or head(m, h))
    monkeypatch.setattr(hf, "SCORE_CHUNK", 4)
    assert tiny.score(prompt, completion, temperature=0.7) == pytest.approx(full, abs=1e-5)
    assert seen == [4, 4, 3]


async def test_greedy_logprobs_are_raw_logprobs_of_the_argmax(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 4)
    gens = await tiny.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=40))
    for prompt, g in zip(prompts, gens, strict=True):
        ids = torch.tensor([prompt + list(g.token_ids)])
        with torch.no_grad():
            logits = tiny.model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        assert logits.argmax(-1).tolist() == list(g.token_ids)
        raw = torch.log_softmax(logits, -1).max(-1).values.tolist()
        assert raw == pytest.approx(list(g.logprobs), abs=2e-4)


async def test_left_padding_does_not_change_greedy_output(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 5)  # different lengths, so the batch is padded
    assert len({len(p) for p in prompts}) > 1
    params = SamplingParams(temperature=0.0, max_new_tokens=40)
    batched = await tiny.generate(prompts, params)
    for prompt, g in zip(prompts, batched, strict=True):
        (alone,) = await tiny.generate([prompt], params)
        assert alone.token_ids == g.token_ids


async def test_same_seed_same_samples_other_seed_differs(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 8)
    a = await tiny.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=40, seed=123))
    b = await tiny.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=40, seed=123))
    c = await tiny.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=40, seed=124))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


async def test_top_p_restricts_to_the_nucleus(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 4)
    gens = await tiny.generate(
        prompts, SamplingParams(temperature=1.0, top_p=0.05, max_new_tokens=40, seed=1)
    )
    greedy = await tiny.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=40))
    # a tiny nucleus holds only the top token: sampling becomes greedy, with probability 1 each step
    assert [g.token_ids for g in gens] == [g.token_ids for g in greedy]
    assert all(lp == pytest.approx(0.0, abs=1e-6) for g in gens for lp in g.logprobs)


async def test_stop_string_ends_generation_and_stays_in_text(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 4)
    gens = await tiny.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=40, stop=("return",)))
    for g in gens:
        assert g.finish_reason == "stop"
        assert g.text.count("return") == 1
        assert "return" not in tiny.tokenizer.decode(list(g.token_ids[:-1]))


async def test_load_weights_bumps_version_and_changes_outputs() -> None:
    from trialground.policy.config import PolicyConfig

    policy = HFPolicy(PolicyConfig(model="tiny"))  # its own copy: the weights are modified
    prompts = _prompts(policy, 4)
    params = SamplingParams(temperature=0.0, max_new_tokens=20)
    before = await policy.generate(prompts, params)
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    torch.manual_seed(0)
    for name, value in state.items():
        if name.endswith("mlp.down_proj.weight"):
            value.add_(torch.randn_like(value) * 0.5)
    policy.load_weights(state, version=7)
    after = await policy.generate(prompts, params)
    assert policy.version == 7 and all(g.version == 7 for g in after)
    assert [g.token_ids for g in before] != [g.token_ids for g in after]
    with pytest.raises(PolicyError, match="unknown parameter"):
        policy.load_weights({"not.a.param": torch.zeros(1)}, version=8)
    assert policy.version == 7


def test_load_weights_during_a_generation_does_not_wait_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's push returns while a generation runs; that generation keeps the weights and version
    it started with, the next one samples with the pushed weights and carries the new version."""
    import threading

    from trialground.policy.backends.hf import hf
    from trialground.policy.config import PolicyConfig

    policy = HFPolicy(PolicyConfig(model="tiny"))
    prompts = _prompts(policy, 4)
    params = SamplingParams(temperature=0.0, max_new_tokens=20)
    old = policy.generate_sync(prompts, params)
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    for name, value in state.items():
        if name.endswith("mlp.down_proj.weight"):
            value.add_(torch.randn(value.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
    started, loaded = threading.Event(), threading.Event()
    real = hf.sample_batch

    def held_sample_batch(*args: object, **kwargs: object) -> object:
        started.set()
        assert loaded.wait(10), "load_weights waited for the running generation"
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hf, "sample_batch", held_sample_batch)
    out: list[object] = []
    runner = threading.Thread(target=lambda: out.append(policy.generate_sync(prompts, params)))
    runner.start()
    assert started.wait(10)
    policy.load_weights(state, version=7)
    loaded.set()
    runner.join(20)
    in_flight = out[0]
    assert isinstance(in_flight, list)
    assert [g.token_ids for g in in_flight] == [g.token_ids for g in old]
    assert all(g.version == 0 for g in in_flight)
    assert policy.version == 0  # staged, applied by the next generation
    monkeypatch.setattr(hf, "sample_batch", real)
    new = policy.generate_sync(prompts, params)
    assert policy.version == 7 and all(g.version == 7 for g in new)
    assert [g.token_ids for g in new] != [g.token_ids for g in old]
    assert torch.equal(
        policy.model.state_dict()["model.layers.0.mlp.down_proj.weight"],
        state["model.layers.0.mlp.down_proj.weight"],
    )


async def test_empty_prompt_is_a_policy_error(tiny: HFPolicy) -> None:
    with pytest.raises(PolicyError):
        await tiny.generate([[]], SamplingParams())
    assert await tiny.generate([], SamplingParams()) == []


def test_sampling_seed_decides_unseeded_generations(tiny: HFPolicy) -> None:
    prompts = _prompts(tiny, 8)
    params = SamplingParams(temperature=1.0, max_new_tokens=24)

    def run(seed: int) -> list[tuple[int, ...]]:
        tiny.seed_sampling(seed)
        return [g.token_ids for g in tiny.generate_sync(prompts, params)]

    assert run(0) == run(0)
    assert run(1) == run(1)
    assert run(0) != run(1)


def test_greedy_generations_leave_the_sampling_stream_alone(tiny: HFPolicy) -> None:
    """However many greedy calls an evaluation makes (their batching depends on timing), the sampled
    generations after it are the same."""
    prompts = _prompts(tiny, 8)
    sample = SamplingParams(temperature=1.0, max_new_tokens=24)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)

    def run(greedy_calls: int) -> list[list[tuple[int, ...]]]:
        tiny.seed_sampling(3)
        out = []
        for _ in range(2):
            for i in range(greedy_calls):
                tiny.generate_sync(prompts[i % 8 :], greedy)
            out.append([g.token_ids for g in tiny.generate_sync(prompts, sample)])
        return out

    plain = run(0)
    assert plain[0] != plain[1]  # consecutive sampled calls still differ
    assert run(1) == plain and run(3) == plain
