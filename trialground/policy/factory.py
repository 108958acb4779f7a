"""`make_policy(config)`: the one place that maps `PolicyConfig.backend` to a policy, through the registry
of policy backends (`trialground.policy.backends`)."""

from __future__ import annotations

from collections.abc import Callable

from trialground.errors import ConfigError
from trialground.policy.backends import BACKENDS
from trialground.policy.base import Policy
from trialground.policy.config import PolicyConfig


def make_policy(config: PolicyConfig) -> Policy:
    """The policy of `config.backend` (a registered backend, or a plugin's `package.module:NAME`)."""
    backend = BACKENDS.lookup(config.backend)
    make: Callable[[PolicyConfig], Policy] = backend.load("policy backend", ConfigError)
    return make(config)


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
