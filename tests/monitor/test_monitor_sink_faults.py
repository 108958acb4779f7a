"""Every sink takes the keys a real run emits, and a failing sink never ends the run.

`real_run_metrics.jsonl` is the `metrics.jsonl` of a real short run (`trialground train
examples/quickstart.yaml --set loop.steps=2 --set loop.eval_interval=1 --set tasks.num_eval=8`): it
has the key pairs (`eval/n_tasks` and `eval/n_tasks/code`) that once crashed the MLflow file store.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from trialground.errors import ConfigError
from trialground.monitor import Monitor, MonitorConfig
from trialground.monitor.sinks import finite, open_sink
from trialground.monitor.sinks.jsonl import read_metrics

REAL_ROWS = [
    {k: v for k, v in row.items() if k not in ("step", "time")} | {"_step": row["step"]}
    for row in map(json.loads, (Path(__file__).parent / "real_run_metrics.jsonl").read_text().splitlines())
]


def _feed_real(mon: Monitor) -> None:
    for row in REAL_ROWS:
        step = int(row["_step"])
        mon.observe(step, {k: v for k, v in row.items() if k != "_step"})


def _expected() -> dict[tuple[int, str], float]:
    return {
        (int(row["_step"]), k): v
        for row in REAL_ROWS
        for k, v in finite({k: v for k, v in row.items() if k != "_step"}).items()
    }


def test_real_keys_include_a_metric_that_is_also_a_prefix() -> None:
    keys = {k for row in REAL_ROWS for k in row}
    assert any(f"{k}/" in other for k in keys for other in keys), "fixture lost the colliding pairs"


def test_jsonl_keeps_every_real_key(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False, sinks=("jsonl",))) as mon:
        _feed_real(mon)
        assert not mon.failed_sinks
    rows = read_metrics(tmp_path / "metrics.jsonl")
    got = {(r["step"], k): v for r in rows for k, v in r.items() if k not in ("step", "time")}
    fed = {(int(row["_step"]), k): v for row in REAL_ROWS for k, v in row.items() if k != "_step"}
    assert {key: got.get(key) for key in fed} == fed
    _assert_only_derived(set(got) - set(fed))


def _assert_only_derived(extra: set[tuple[int, str]]) -> None:
    """Keys a sink holds beyond the ones fed: only the monitor's own (the reward-evaluation check)."""
    assert all(k.startswith("monitor/reward_eval_") for _, k in extra), sorted(extra)


def test_mlflow_keeps_every_real_key_apart(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="mlflow not installed (monitor extra)")
    from mlflow.tracking import MlflowClient

    from trialground.monitor.sinks.mlflow import mlflow_key

    with Monitor(tmp_path, MonitorConfig(console=False, sinks=("jsonl", "mlflow"))) as mon:
        _feed_real(mon)
        assert not mon.failed_sinks, mon.failed_sinks
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("trialground")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    expected = _expected()
    assert len({mlflow_key(k) for _, k in expected}) == len({k for _, k in expected})  # no two merge
    got = {
        (m.step, key): m.value
        for key in {k for _, k in expected}
        for m in client.get_metric_history(run.info.run_id, mlflow_key(key))
    }
    assert got == pytest.approx(expected)
    assert mlflow_key("eval/pass@1") == "eval.pass_at_1"


def test_tensorboard_keeps_every_real_key(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX", reason="tensorboardX not installed (monitor extra)")
    from tensorboardX.proto.event_pb2 import Event

    with Monitor(tmp_path, MonitorConfig(console=False, sinks=("tensorboard",))) as mon:
        _feed_real(mon)
        assert not mon.failed_sinks
    (events,) = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    data, pos, got = events.read_bytes(), 0, {}
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event.FromString(data[pos + 12 : pos + 12 + n])
        pos += 12 + n + 4
        got.update({(event.step, v.tag): v.simple_value for v in event.summary.value})
    # tensorboardX turns characters a tag may not hold into `_` (`eval/pass@1` is `eval/pass_1`)
    expected = {(step, re.sub(r"[^-/\w.]", "_", k)): v for (step, k), v in _expected().items()}
    assert len(expected) == len(_expected())
    kept = {key: got.get(key) for key in expected}
    assert kept == pytest.approx(expected, rel=1e-6, abs=1e-30)  # stored as float32
    _assert_only_derived(set(got) - set(expected))


@pytest.mark.slow
def test_wandb_takes_every_real_key(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="wandb not installed (monitor extra)")
    with Monitor(tmp_path, MonitorConfig(console=False, sinks=("wandb",))) as mon:
        _feed_real(mon)
        assert not mon.failed_sinks, mon.failed_sinks
    (run,) = list((tmp_path / "wandb").glob("offline-run-*"))
    assert list(run.glob("*.wandb")), "no offline run file"


class _AlwaysRaises:
    def __init__(self) -> None:
        self.writes = 0
        self.closed = 0

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        self.writes += 1
        raise RuntimeError(f"backend down at step {step}")

    def close(self) -> None:
        self.closed += 1
        raise OSError("close failed too")


def test_a_sink_that_raises_on_every_write_is_reported_once_and_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = _AlwaysRaises()
    caplog.set_level(logging.WARNING, logger="trialground.monitor.monitor")
    with Monitor(tmp_path, MonitorConfig(console=False, sinks=("jsonl",))) as mon:
        mon.add_sink("flaky", bad)
        alerts = [a for step in range(5) for a in mon.observe(step, {"reward/mean": 0.5})]
        assert mon.failed_sinks == {"flaky": "RuntimeError: backend down at step 0"}
    assert bad.writes == 1 and bad.closed == 1  # never touched again after the first failure
    (alert,) = [a for a in alerts if a.rule == "sink_failed"]
    assert alert.step == 0 and alert.action == "warn" and "flaky" in alert.message
    logged = [r for r in caplog.records if "flaky" in r.getMessage()]
    assert len([r for r in logged if "disabled" in r.getMessage()]) == 1
    assert any("close failed too" in e for e in mon.errors)
    on_disk = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [a["rule"] for a in on_disk] == ["sink_failed"]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]  # the other sink lost nothing
    assert "monitor/sinks_failed" not in rows[0]
    assert all(r["monitor/sinks_failed"] == 1.0 for r in rows[1:])


def test_a_really_failing_builtin_sink_does_not_stop_the_others(tmp_path: Path) -> None:
    """metrics.jsonl on a full device: every write fails with ENOSPC, for real."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to("/dev/full")
    extra: tuple[str, ...] = ("tensorboard",) if _has("tensorboardX") else ()
    with Monitor(run, MonitorConfig(console=False, sinks=("jsonl", *extra))) as mon:  # type: ignore[arg-type]
        alerts = [a for step in range(3) for a in mon.observe(step, {"reward/mean": 1.0})]
    assert list(mon.failed_sinks) == ["jsonl"] and "No space left" in mon.failed_sinks["jsonl"]
    assert [a.rule for a in alerts] == ["sink_failed"]
    if extra:
        assert list((run / "tensorboard").glob("events.out.tfevents.*"))


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(("sink", "modules"), [
    ("mlflow", ("mlflow", "mlflow.tracking")),
    ("wandb", ("wandb",)),
    ("tensorboard", ("tensorboardX", "torch.utils.tensorboard")),
])  # fmt: skip
def test_a_missing_optional_sink_library_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink: str, modules: tuple[str, ...]
) -> None:
    for module in modules:  # None in sys.modules makes `import module` raise ImportError
        monkeypatch.setitem(sys.modules, module, None)
    # each sink is its own extra, named like the sink
    with pytest.raises(ConfigError, match=rf"the {sink} sink needs .*pip install 'trialground\[{sink}\]'"):
        open_sink(sink, tmp_path)
