"""HFProcessPolicy: the hf policy in a real child process gives the in-process policy's exact tokens,
receives weight pushes in order, and turns a dead child into PolicyError instead of a hang."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from trialground.errors import PolicyError
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.hf.hf_process import HFProcessPolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.factory import make_policy

CONFIG = PolicyConfig(model="tiny", separate_process=True)


@pytest.fixture(scope="module")
def remote() -> Iterator[HFProcessPolicy]:
    policy = make_policy(CONFIG)
    assert isinstance(policy, HFProcessPolicy)
    yield policy
    policy.close()


def _prompts(policy: HFPolicy | HFProcessPolicy, n: int, k: int) -> list[list[int]]:
    tasks = generate_codegen_tasks(n, seed=3, split="eval")
    return [policy.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks for _ in range(k)]


def _perturbed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {k: v.clone() for k, v in state.items()}
    g = torch.Generator().manual_seed(0)
    for name, value in out.items():
        if name.endswith("mlp.down_proj.weight"):
            value.add_(torch.randn(value.shape, generator=g) * 0.5)
    return out


async def test_same_tokens_as_in_process_before_and_after_a_weight_push(remote: HFProcessPolicy) -> None:
    local = HFPolicy(PolicyConfig(model="tiny"))
    prompts = _prompts(local, 3, 4)
    params = SamplingParams(temperature=1.0, max_new_tokens=32, seed=7)
    mine, theirs = local.generate_sync(prompts, params), await remote.generate(prompts, params)
    assert [g.token_ids for g in mine] == [g.token_ids for g in theirs]
    assert [g.logprobs for g in mine] == [g.logprobs for g in theirs]
    assert {g.version for g in theirs} == {0}

    state = _perturbed(local.model.state_dict())
    remote.load_weights(state, version=4)
    assert remote.version == 4
    local.load_weights(state, version=4)
    mine, theirs = local.generate_sync(prompts, params), remote.generate_sync(prompts, params)
    assert [g.token_ids for g in mine] == [g.token_ids for g in theirs]
    assert {g.version for g in theirs} == {4}
    original = HFPolicy(PolicyConfig(model="tiny")).model.state_dict()
    remote.load_weights(original, version=5)  # back to the bundled weights for the other tests
    assert [g.token_ids for g in remote.generate_sync(prompts, params)] != [g.token_ids for g in mine]


def test_sampling_rng_state_round_trips(remote: HFProcessPolicy) -> None:
    prompts = _prompts(remote, 2, 4)
    params = SamplingParams(temperature=1.0, max_new_tokens=16)  # unseeded: the policy's RNG decides
    remote.seed_sampling(11)
    state = remote.sampling_rng_state()
    first = remote.generate_sync(prompts, params)
    remote.set_sampling_rng_state(state)
    again = remote.generate_sync(prompts, params)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.token_ids for g in remote.generate_sync(prompts, params)] != [g.token_ids for g in first]


def test_unknown_weights_are_refused_before_anything_is_sent(remote: HFProcessPolicy) -> None:
    with pytest.raises(PolicyError, match="unknown parameter names"):
        remote.load_weights({"not.a.param": torch.zeros(1)}, version=9)
    assert remote.version != 9
    assert remote.generate_sync([[5, 6]], SamplingParams(max_new_tokens=2))  # still serving


async def test_a_dead_child_is_a_policy_error_not_a_hang() -> None:
    policy = HFProcessPolicy(CONFIG)
    assert policy.generate_sync([[5, 6]], SamplingParams(max_new_tokens=2))
    assert policy._proc.pid is not None
    os.kill(policy._proc.pid, signal.SIGKILL)
    with pytest.raises(PolicyError, match=r"exited \(exit code -9\)"):
        await policy.generate([[5, 6]], SamplingParams(max_new_tokens=2))
    with pytest.raises(PolicyError, match="exit code -9"):
        policy.load_weights({}, version=1)
    policy.close()


def test_a_model_the_child_cannot_load_fails_every_call(tmp_path: Path) -> None:
    from trialground.policy.tiny import tiny_model_dir

    broken = tmp_path / "model"  # tokenizer and config, but no weights
    shutil.copytree(tiny_model_dir(), broken, ignore=shutil.ignore_patterns("*.safetensors"))
    policy = HFProcessPolicy(PolicyConfig(model=str(broken), separate_process=True))  # tokenizer loads here
    with pytest.raises(PolicyError, match="could not load model"):
        policy.generate_sync([[5, 6]], SamplingParams(max_new_tokens=2))
    with pytest.raises(PolicyError, match="could not load model"):
        policy.load_weights({}, version=1)
    policy.close()
