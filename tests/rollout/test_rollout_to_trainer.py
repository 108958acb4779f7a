"""Rollouts from the HF policy feed the trainer: the sampler's logprobs are the trainer's (ratio 1 before
the update), at the sampling temperature, with env tokens masked; weights and versions flow back."""

from __future__ import annotations

import pytest
from reward_helpers import scored

pytest.importorskip("torch", reason="needs the [train] extra")

import torch
from rollout_helpers import ShellEnv, tiny_policy

from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout_group
from trialground.tasks.model import Task, VerifierSpec
from trialground.train.advantages import compute_advantages, with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer, build_samples

TASK = Task(
    domain="code", prompt="Write anything.", verifier=VerifierSpec(kind="exact", params={"answer": "-"})
)


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> HFPolicy:
    return tiny_policy(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_sampler_and_trainer_agree_then_weights_flow_back(policy: HFPolicy, temperature: float) -> None:
    params = SamplingParams(temperature=temperature, max_new_tokens=8)
    group = scored(
        await rollout_group(
            policy, lambda: ShellEnv(turns=2), TASK, 4, params=params, group_id="x", max_context_tokens=1024
        )
    )
    assert all(t.ok for t in group)
    adv = compute_advantages(group, "grpo")
    if all(a == 0.0 for a in adv):  # every sample got the same reward: give the update some signal
        adv = [1.0, -1.0, 0.5, -0.5]
    # the tokens the trainer trains on are exactly the tokens the policy produced, nothing else
    for t, sample in zip(group, build_samples(with_advantages(group, adv)), strict=True):
        trained = [sample.ids[j + 1] for j, m in enumerate(sample.mask) if m]
        assert trained == [i for turn in t.turns if turn.role == "policy" for i in turn.token_ids]
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    trainer = Trainer(
        policy.model,
        TrainerConfig(lr=1e-2, skip_zero_advantage=False),
        policy.tokenizer.pad_token_id,
        temperature=temperature,
    )
    m = trainer.step(with_advantages(group, adv))
    # left-padded KV-cache sampling and right-padded full forward give the same logprobs
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["train/clip_frac"] == 0.0
    assert m["train/tokens"] == sum(sum(t.completion()[1]) for t in group)
    # shared module: the policy already samples with the new weights; load_weights stamps the version
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    policy.load_weights(trainer.state_dict(), trainer.version)
    assert policy.version == trainer.version == 1
    nxt = scored(
        await rollout_group(
            policy, lambda: ShellEnv(turns=1), TASK, 2, params=params, group_id="y", max_context_tokens=1024
        )
    )
    assert all(t.policy_version == 1 for t in nxt)
    policy.version = 0  # leave the module fixture as other tests expect
