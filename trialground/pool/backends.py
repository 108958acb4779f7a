"""Environment-pool backends, where the pool's sandboxes live: `pool.backend` names one (or a plugin's
`package.module:NAME`), `pool.params` holds its own settings; `cluster: ray` picks `ray`.

A backend's `factory` is `(SandboxConfig, PoolConfig) -> trialground.pool.backend.SandboxBackend` (or its
dotted path, imported on first use: Ray is an optional extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trialground.errors import EnvError
from trialground.plugin import Plugin, Requirement
from trialground.registry import Registry


@dataclass(frozen=True)
class PoolCaps:
    """What a pool backend is."""

    workers: bool
    """Its sandboxes live in worker processes (other machines, perhaps): a lost worker is replaced and the
    episodes it held start again on a live one."""


@dataclass(frozen=True)
class PoolBackend(Plugin[PoolCaps]):
    """A pool backend (see the module docstring)."""


def _local(sandbox_config: Any, pool_config: Any) -> Any:
    from trialground.pool.backend import LocalBackend

    return LocalBackend(sandbox_config)


BACKENDS: Registry[PoolBackend] = Registry("pool backend", PoolBackend, EnvError, error_kind="config")
for _b in (
    PoolBackend("local", _local, PoolCaps(workers=False), doc="sandboxes in this process"),
    PoolBackend(
        "ray",
        "trialground.pool.ray_backend:RayBackend",
        PoolCaps(workers=True),
        requires=(Requirement(module="ray", extra="ray", why="sandbox workers are Ray actors"),),
        doc="sandboxes on Ray actors over a cluster's CPU nodes",
    ),
):
    BACKENDS.register(_b)


def make_backend(sandbox_config: Any, pool_config: Any) -> Any:
    """The `SandboxBackend` of `pool_config.backend`."""
    return BACKENDS.lookup(pool_config.backend).load("pool backend", EnvError)(sandbox_config, pool_config)
