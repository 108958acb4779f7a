"""Fixtures of the loop-level tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One local Ray cluster for a module's runs (a run joins a running cluster instead of starting one)."""
    ray = pytest.importorskip("ray")
    from trialground.pool.ray_backend import start_ray

    start_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
