"""The scripted policy backend: fixed or computed responses (tests, demos). Its modules are private to this
folder (an import-linter contract): the rest of the package uses only what is named here."""

from __future__ import annotations

from trialground.errors import ConfigError
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import Policy
from trialground.policy.config import PolicyConfig


def make_policy(config: PolicyConfig) -> Policy:
    """The backend's factory: `policy.responses` in order, cycled."""
    if not config.responses:
        raise ConfigError("policy.backend=scripted needs policy.responses (at least one)")
    return ScriptedPolicy(list(config.responses), tokenizer=load_tokenizer(config.tokenizer))


__all__ = ["ScriptedPolicy", "load_tokenizer", "make_policy"]
