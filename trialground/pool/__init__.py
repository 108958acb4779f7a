"""The environment pool: lifecycle, warm sandboxes, health, recycling, backpressure; local and Ray."""

from trialground.pool.autoscale import Autoscaler
from trialground.pool.backend import LocalBackend, SandboxBackend
from trialground.pool.config import PoolConfig
from trialground.pool.gate import AcquireTimeout, CapacityGate, PoolFull
from trialground.pool.pool import EnvPool

__all__ = [
    "AcquireTimeout",
    "Autoscaler",
    "CapacityGate",
    "EnvPool",
    "LocalBackend",
    "PoolConfig",
    "PoolFull",
    "SandboxBackend",
]
