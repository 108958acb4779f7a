"""ScriptedPolicy: canned responses, real tokenizer, honest finish reasons; make_policy builds it."""

from __future__ import annotations

import pytest

from trialground.errors import ConfigError, PolicyError
from trialground.policy import make_policy
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig

CODE = "def f(x):\n    x = x + 3\n    return x\n"


async def test_responses_cycle_and_end_with_eos() -> None:
    policy = ScriptedPolicy([CODE, "def f(x):\n    return x\n"])
    prompts = [[3, 10, 11], [3, 12]]
    a, b = await policy.generate(prompts, SamplingParams())
    (c,) = await policy.generate(prompts[:1], SamplingParams())
    assert (a.text, b.text, c.text) == (CODE, "def f(x):\n    return x\n", CODE)
    assert a.finish_reason == "eos" and a.token_ids[-1] == policy.tokenizer.eos_token_id
    assert policy.tokenizer.decode(a.token_ids, skip_special_tokens=True) == CODE
    assert len(a.logprobs) == len(a.token_ids) and set(a.logprobs) == {-1.0}
    assert policy.calls == [*prompts, prompts[0]]


async def test_callable_length_and_stop() -> None:
    policy = ScriptedPolicy(lambda prompt, i: f"answer {i} for {len(prompt)} chars\nmore")
    (g,) = await policy.generate([[5, 6]], SamplingParams(max_new_tokens=2))
    assert g.finish_reason == "length" and len(g.token_ids) == 2
    (g,) = await policy.generate([[5, 6]], SamplingParams(stop=("\n",)))
    assert g.finish_reason == "stop" and g.text.startswith("answer 1 for") and g.text.endswith("\n")


async def test_load_weights_sets_version() -> None:
    policy = ScriptedPolicy([CODE])
    policy.load_weights({}, version=3)
    (g,) = await policy.generate([[1]], SamplingParams())
    assert g.version == 3


async def test_factory_builds_scripted_and_rejects_missing_responses() -> None:
    policy = make_policy(PolicyConfig(backend="scripted", responses=(CODE,)))
    assert isinstance(policy, ScriptedPolicy)
    (g,) = await policy.generate([[1, 2]], SamplingParams())
    assert g.text == CODE
    with pytest.raises(ConfigError):
        make_policy(PolicyConfig(backend="scripted"))
    with pytest.raises(PolicyError):
        ScriptedPolicy([])


def test_factory_builds_hf_for_tiny() -> None:
    from trialground.policy.backends.hf.hf import HFPolicy

    assert isinstance(make_policy(PolicyConfig()), HFPolicy)
