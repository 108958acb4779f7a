"""benchmarks/sandbox_slo.py at a tiny concurrency: every reported field is there, nothing failed, and a
wrong tool output is counted as a failure (so the 0 is a measurement, not a default)."""

from __future__ import annotations

import asyncio
import math
from types import ModuleType

import pytest
from script_helpers import load_script


@pytest.fixture(scope="module")
def slo() -> ModuleType:
    return load_script("benchmarks/sandbox_slo.py")


def test_tiny_run_reports_every_field_and_no_failure(slo: ModuleType) -> None:
    row = asyncio.run(slo.level(3, execs=2, timeout_s=120.0, wall_s=60.0))
    assert set(slo.FIELDS) <= set(row)
    assert row["failures"] == 0 and row["failure_rate"] == 0.0, row["failure_kinds"]
    assert row["pool_errors"] == 0, row["pool_error_kinds"]
    assert row["n"] == 3 and row["episodes"] == 6 and row["created"] == 3
    for key in ("acquire_cold_p50_ms", "acquire_warm_p95_ms", "exec_p50_ms", "exec_p95_ms", "restore_p50_ms"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["reseeded"] >= 1 and row["reseed_p50_ms"] > 0  # odd workers changed task
    # the memory sample was taken while all 3 held a sandbox: this process, the fork server, 3 supervisors
    assert row["processes"] >= 4 and row["pss_per_sandbox_mib"] > 0 and row["fds_self"] > 0
    assert row["cluster"] == "local" and "| 3 | local | 6 | 0 |" in slo.table([row])


@pytest.mark.ray
def test_the_same_levels_run_through_ray(slo: ModuleType) -> None:
    """`--cluster ray`: the pool's sandboxes live on Ray sandbox-worker actors (a local Ray cluster); the
    episodes are the same and the memory sample counts the workers and the sandboxes below them."""
    pytest.importorskip("ray")
    row = asyncio.run(slo.level(2, execs=1, timeout_s=300.0, wall_s=120.0, cluster="ray", ray_workers=1))
    assert row["failures"] == 0 and row["pool_errors"] == 0, (row["failure_kinds"], row["pool_error_kinds"])
    assert row["cluster"] == "ray (1 workers)" and row["created"] == 2 and row["episodes"] == 4
    assert row["backend_start_s"] > 0
    # this process, the worker actor and, below it, the fork server and two sandboxes' processes
    assert row["processes"] >= 4 and row["pss_per_sandbox_mib"] > 0


def test_a_wrong_tool_output_is_a_failure(slo: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slo, "probe", lambda k, e: ("echo nope", f"{k}:{e}"))
    row = asyncio.run(slo.level(2, execs=1, timeout_s=120.0, wall_s=60.0))
    assert row["failures"] == 4 and row["failure_rate"] == 1.0 and row["pool_errors"] == 0
    assert row["failure_kinds"] == {"wrong_output": 4}
    assert row["failure_examples"][0] == "[exit 0]\nnope"
