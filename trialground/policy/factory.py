"""`make_policy(config)`: the one place that maps `PolicyConfig.backend` to a policy class.

Backends import lazily, so a core install (no torch) can still build the openai and scripted policies.
"""

from __future__ import annotations

from trialground.errors import ConfigError
from trialground.policy.base import Policy
from trialground.policy.config import PolicyConfig


def make_policy(config: PolicyConfig) -> Policy:
    if config.backend == "hf" and config.separate_process:
        from trialground.policy.hf_process import HFProcessPolicy

        return HFProcessPolicy(config)
    if config.backend == "hf":
        from trialground.policy.hf import HFPolicy

        return HFPolicy(config)
    if config.backend == "vllm":
        from trialground.policy.vllm import VLLMPolicy

        return VLLMPolicy(config)
    if config.backend == "openai":
        from trialground.policy.openai import OpenAIPolicy

        return OpenAIPolicy(config)
    if config.backend == "remote":
        from trialground.policy.remote import RemotePolicy

        return RemotePolicy(config)
    if config.backend == "scripted":
        from trialground.policy.scripted import ScriptedPolicy, load_tokenizer

        if not config.responses:
            raise ConfigError("policy.backend=scripted needs policy.responses (at least one)")
        return ScriptedPolicy(list(config.responses), tokenizer=load_tokenizer(config.tokenizer))
    raise ConfigError(f"unknown policy backend {config.backend!r}")


def require_trainable(config: PolicyConfig, policy: Policy) -> None:
    """Refuse, before a run starts, a policy that training cannot use (`Policy.trainable` False), naming
    the backend that can."""
    if policy.trainable:
        return
    raise ConfigError(
        f"policy.backend={config.backend} cannot train: it is for evaluation only (it cannot take new "
        "weights, and it re-tokenises the endpoint's text). To train with separate inference servers use "
        "policy.backend=remote with policy.servers (vLLM or `trialground policy serve`); see "
        "docs/serving.md"
    )
