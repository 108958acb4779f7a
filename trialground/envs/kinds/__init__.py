"""Environment kinds: `env.kind` names one (or a plugin's `package.module:NAME`), `env.params` holds its own
settings.

A kind's `factory` builds one environment for the environment pool (or its dotted path):
`(grader, env_config, sandbox_config, *, sandbox, task, owns_sandbox, initial_snapshot, on_exec)
-> Environment`; a kind that needs no sandbox gets `sandbox=None`. The core asks its `EnvCaps`, never its
name. `prepare_sandbox` (optional, a function or its dotted path) is
`(SandboxConfig, EnvConfig, gateway_socket_dir) -> SandboxConfig`, called once at wiring for a kind whose
episodes are played by an agent program against the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trialground.errors import EnvError
from trialground.plugin import Plugin
from trialground.registry import Registry


@dataclass(frozen=True)
class EnvCaps:
    """What an environment kind needs of the run."""

    needs_sandbox: bool
    """Each episode works in a sandbox of the environment pool (tools run there)."""
    gateway: bool = False
    """Episodes are played by the agent's own program against the run's OpenAI-compatible gateway."""
    host_views: bool = False
    """Its sandboxes must show host directories and sockets (`SandboxCaps.host_views`)."""
    branches: bool = True
    """The trainer's agent loop plays its episodes, so `loop.branch` can fork them."""


@dataclass(frozen=True)
class EnvKind(Plugin[EnvCaps]):
    """An environment kind (see the module docstring)."""

    prepare_sandbox: Any = None


def _single_turn(grader: Any, *args: Any, **kwargs: Any) -> Any:
    from trialground.envs.single_turn import SingleTurnEnv

    return SingleTurnEnv(grader)


KINDS: Registry[EnvKind] = Registry("environment kind", EnvKind, EnvError, error_kind="config")
for _k in (
    EnvKind(
        "single_turn",
        _single_turn,
        EnvCaps(needs_sandbox=False),
        doc="the completion is the submission, graded once",
    ),
    EnvKind(
        "tool",
        "trialground.envs.tool_env:ToolEnv",
        EnvCaps(needs_sandbox=True),
        doc="the trainer's agent loop: tool calls in the task's sandbox",
    ),
    EnvKind(
        "harness",
        "trialground.envs.harness:HarnessEnv",
        EnvCaps(needs_sandbox=True, gateway=True, host_views=True, branches=False),
        check="trialground.envs.harness:check_config",
        prepare_sandbox="trialground.envs.harness:harness_sandbox_config",
        doc="your own agent program, run in the task's sandbox against the gateway (docs/harness.md)",
    ),
):
    KINDS.register(_k)
