"""`make_policy(config)`: the one place that maps `PolicyConfig.backend` to a policy, through the registry
of policy backends."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trialground.errors import ConfigError
from trialground.policy.base import Policy
from trialground.policy.config import PolicyConfig
from trialground.registry import Registry, import_path


@dataclass(frozen=True)
class PolicyBackend:
    """A policy backend: `policy.backend` names it; `make` is the dotted path of `(PolicyConfig) -> Policy`
    (imported on first use, so a core install without torch can still build the openai and scripted
    policies)."""

    name: str
    make: str
    doc: str = ""


BACKENDS: Registry[PolicyBackend] = Registry(
    "policy backend", PolicyBackend, ConfigError, error_kind="config"
)
for _b in (
    PolicyBackend("hf", "trialground.policy.factory:_hf", "transformers, in this process or a child"),
    PolicyBackend("vllm", "trialground.policy.vllm:VLLMPolicy", "vLLM in this process"),
    PolicyBackend("openai", "trialground.policy.openai:OpenAIPolicy", "an OpenAI-compatible endpoint (eval)"),
    PolicyBackend("remote", "trialground.policy.remote:RemotePolicy", "vLLM-compatible inference servers"),
    PolicyBackend("scripted", "trialground.policy.factory:_scripted", "fixed responses (tests, demos)"),
):
    BACKENDS.register(_b)


def make_policy(config: PolicyConfig) -> Policy:
    """The policy of `config.backend` (a registered backend, or a plugin's `package.module:NAME`)."""
    backend = BACKENDS.lookup(config.backend)
    make: Callable[[PolicyConfig], Policy] = import_path(
        backend.make, what=f"policy backend {backend.name!r}", error=ConfigError, kind="config"
    )
    return make(config)


def _hf(config: PolicyConfig) -> Policy:
    if config.separate_process:
        from trialground.policy.hf_process import HFProcessPolicy

        return HFProcessPolicy(config)
    from trialground.policy.hf import HFPolicy

    return HFPolicy(config)


def _scripted(config: PolicyConfig) -> Policy:
    from trialground.policy.scripted import ScriptedPolicy, load_tokenizer

    if not config.responses:
        raise ConfigError("policy.backend=scripted needs policy.responses (at least one)")
    return ScriptedPolicy(list(config.responses), tokenizer=load_tokenizer(config.tokenizer))


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
