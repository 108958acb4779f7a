"""Optional sinks write real files with their own libraries (skipped when the library is absent)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from trialground.errors import ConfigError
from trialground.monitor import Monitor, MonitorConfig
from trialground.monitor.sinks import open_sink


def _feed(tmp: Path, sink: str) -> None:
    with Monitor(tmp, MonitorConfig(console=False, sinks=("jsonl", sink))) as mon:  # type: ignore[arg-type]
        for s in range(3):
            mon.observe(s, {"reward/mean": 0.1 * s, "eval/pass@1": 0.2, "train/loss": float("nan")})


def test_tensorboard_event_file(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX", reason="tensorboardX not installed (monitor extra)")
    from tensorboardX.proto.event_pb2 import Event

    _feed(tmp_path, "tensorboard")
    (events,) = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    # TFRecord framing: u64 length, u32 crc, payload, u32 crc.
    data, pos, scalars = events.read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event.FromString(data[pos + 12 : pos + 12 + n])
        pos += 12 + n + 4
        scalars += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
    reward = [(step, val) for step, tag, val in scalars if tag == "reward/mean"]
    assert reward == [(0, 0.0), (1, pytest.approx(0.1)), (2, pytest.approx(0.2))]
    assert not any(tag == "train/loss" for _, tag, _ in scalars)  # NaN is not written


def test_mlflow_file_store(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="mlflow not installed (monitor extra)")
    from mlflow.tracking import MlflowClient

    _feed(tmp_path, "mlflow")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("trialground")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    hist = client.get_metric_history(run.info.run_id, "reward.mean")
    assert sorted((m.step, round(m.value, 6)) for m in hist) == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert client.get_metric_history(run.info.run_id, "eval.pass_at_1")
    assert run.info.status == "FINISHED"


@pytest.mark.slow
def test_wandb_offline_run(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="wandb not installed (monitor extra)")
    _feed(tmp_path, "wandb")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert runs, list((tmp_path / "wandb").iterdir())
    assert list(runs[0].glob("*.wandb")), "no offline run file"


def test_unknown_sink_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown metric sink"):
        open_sink("nosuch", tmp_path)
