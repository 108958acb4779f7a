"""A local Ray cluster whose node misses Ray's 30 s start-up window (a machine loaded far past its cores)
is started again, and the timed-out try's processes do not outlive it."""

from __future__ import annotations

from typing import Any

import pytest

from trialground.pool.ray_backend import start_ray

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_local_start_that_times_out_is_tried_again_and_its_processes_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first try's node never shows up in the control store (the lookup Ray polls fails for that try
    only, as on a machine too busy for the raylet to register): Ray gives up after its 30 s, the second try
    starts a working cluster, and every process the first try started is gone."""
    real_init, real_get_node = ray.init, ray._private.services.get_node
    tries: list[set[int]] = []  # this process's children before each try
    seen_in_first: set[int] = set()  # its children while the first try waits for its node
    me = psutil.Process()

    def counted_init(*args: Any, **kwargs: Any) -> Any:
        tries.append({child.pid for child in me.children()})
        return real_init(*args, **kwargs)

    def get_node(*args: Any, **kwargs: Any) -> Any:
        if len(tries) == 1:
            seen_in_first.update(child.pid for child in me.children())
            raise RuntimeError("not registered (the test holds it back)")
        return real_get_node(*args, **kwargs)

    monkeypatch.setattr(ray, "init", counted_init)
    monkeypatch.setattr(ray._private.services, "get_node", get_node)
    try:
        start_ray(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        # two tries at least: on a busy machine a real start may time out as well and be tried again
        assert len(tries) >= 2 and ray.is_initialized()
        assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
        now = {child.pid for child in me.children()}
        first_try = seen_in_first - tries[0]  # what the first try started
        assert first_try, "the first try started no processes"
        assert not (first_try & now), "the timed-out try's processes outlived it"
    finally:
        ray.shutdown()
