"""Policy backends: `policy.backend` names one (or a plugin's `package.module:NAME`), `policy.params` holds
its own settings.

A backend's `factory` is `(PolicyConfig) -> Policy` (or its dotted path, imported on first use, so a core
install without torch can still build the openai and scripted policies); the core asks its `PolicyCaps` and
its `requires`, never its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from trialground.errors import ConfigError
from trialground.plugin import Plugin, Requirement
from trialground.registry import Registry


@dataclass(frozen=True)
class PolicyCaps:
    """What a policy backend needs of the machine before a run starts."""

    loads_model: bool
    """The run loads `policy.model`'s weights from a local directory (the policy itself, or the trainer that
    pushes them to servers); otherwise only `policy.tokenizer` is read locally."""
    model_by_name: bool = False
    """Outside training, `policy.model` may be a name the engine fetches itself (no local weights needed)."""
    engine_memory: bool = False
    """The engine runs on the trainer's device and takes `policy.gpu_memory_utilization` of its memory (the
    memory check before a run leaves the trainer the rest)."""
    shares_module: bool = False
    """The policy samples in the training process with a torch module the trainer can update in place (a
    separate sampler copy exists only where it cannot: FSDP, asynchronous sampling, another dtype)."""


@dataclass(frozen=True)
class PolicyBackend(Plugin[PolicyCaps]):
    """A policy backend (see the module docstring)."""


_TORCH = "install torch first (docs/install.md), then pip install 'trialground[train]'"
TORCH = (
    Requirement(module="torch", extra="train", why="the model runs in torch", install=_TORCH),
    Requirement(
        module="transformers", extra="train", why="the model is loaded by transformers", install=_TORCH
    ),
)

BACKENDS: Registry[PolicyBackend] = Registry(
    "policy backend", PolicyBackend, ConfigError, error_kind="config"
)
for _b in (
    PolicyBackend(
        "hf",
        "trialground.policy.backends.hf:make_policy",
        PolicyCaps(loads_model=True, shares_module=True),
        requires=TORCH,
        doc="transformers, in this process or a child",
    ),
    PolicyBackend(
        "vllm",
        "trialground.policy.backends.vllm.vllm:VLLMPolicy",
        PolicyCaps(loads_model=True, model_by_name=True, engine_memory=True),
        requires=(*TORCH, Requirement(module="vllm", extra="vllm", why="the in-process engine")),
        doc="vLLM in this process",
    ),
    PolicyBackend(
        "openai",
        "trialground.policy.backends.openai.openai:OpenAIPolicy",
        PolicyCaps(loads_model=False),
        doc="an OpenAI-compatible endpoint (eval)",
    ),
    PolicyBackend(
        "remote",
        # the trainer loads the starting weights itself (the servers receive them)
        "trialground.policy.backends.remote.remote:RemotePolicy",
        PolicyCaps(loads_model=True),
        doc="vLLM-compatible inference servers",
    ),
    PolicyBackend(
        "scripted",
        "trialground.policy.backends.scripted:make_policy",
        PolicyCaps(loads_model=False),
        doc="fixed responses (tests, demos)",
    ),
):
    BACKENDS.register(_b)
