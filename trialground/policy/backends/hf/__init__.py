"""The hf policy backend: transformers in this process (`hf.py`) or a child process (`hf_process.py`), the
lean Llama-family decoder (`llama_decode.py`). Its modules are private to this folder (an import-linter
contract): the rest of the package uses only what is named here.
"""

from __future__ import annotations

from trialground.policy.backends.hf.hf import HFPolicy, encode_chat
from trialground.policy.base import Policy
from trialground.policy.config import PolicyConfig


def make_policy(config: PolicyConfig) -> Policy:
    """The backend's factory: in this process, or with `policy.separate_process` in a child."""
    if config.separate_process:
        from trialground.policy.backends.hf.hf_process import HFProcessPolicy

        return HFProcessPolicy(config)
    return HFPolicy(config)


__all__ = ["HFPolicy", "encode_chat", "make_policy"]
