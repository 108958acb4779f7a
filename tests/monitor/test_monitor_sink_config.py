"""Sinks behave like their tools: the run's config recorded, the user's settings honoured, a resume
continues the same run. Real libraries, offline."""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from trialground.errors import ConfigError
from trialground.monitor import Monitor, MonitorConfig
from trialground.monitor.config import MlflowConfig, SinkName
from trialground.monitor.sinks import flatten_config
from trialground.orchestrator.run_config import RunConfig

RUN_CONFIG: dict[str, Any] = RunConfig(name="cfgrun", seed=7).model_dump(mode="json")


def _feed(run: Path, sink: SinkName, steps: range, config: MonitorConfig | None = None, **extra: Any) -> None:
    cfg = config or MonitorConfig(console=False, sinks=(sink,))
    with Monitor(run, cfg, run_config=RUN_CONFIG | extra) as mon:
        for s in steps:
            mon.observe(s, {"reward/mean": 0.1 * s, "eval/pass@1": 0.5})
        assert not mon.failed_sinks, mon.failed_sinks


def test_flatten_config_gives_dotted_scalar_params() -> None:
    flat = flatten_config({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": None, "g": {}, "h": True})
    assert flat == {"a.b": 1, "a.c.d": "x", "e": "[1, 2]", "f": "null", "g": "{}", "h": True}
    real = flatten_config(RUN_CONFIG)
    assert real["seed"] == 7 and real["name"] == "cfgrun"
    assert "policy.sampling.temperature" in real and "monitor.sinks" in real
    assert all(isinstance(v, str | int | float | bool) for v in real.values())


# --- Weights & Biases ---------------------------------------------------------------------------------


def _wandb_records(run_file: Path) -> Iterator[Any]:
    """The records of an offline `.wandb` file (LevelDB log framing: 32 KiB blocks of chunks, each
    chunk a crc32, a little-endian u16 length and a type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = run_file.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer: padding
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        if kind == 0 and length == 0:
            break
        assert zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF == crc, "corrupt record"
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()  # type: ignore[attr-defined]
            record.ParseFromString(pending)
            yield record


def _wandb_config(run_file: Path) -> tuple[str, str, dict[str, Any]]:
    """(run id, project, config) as the offline run file holds them."""
    deadline = time.monotonic() + 30  # W&B's service process may still be flushing the file
    while not any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(run_file)):
        assert time.monotonic() < deadline, f"{run_file} never got its exit record"
        time.sleep(0.2)
    run_id = project = ""
    config: dict[str, Any] = {}
    for rec in _wandb_records(run_file):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run_id, project = rec.run.run_id, rec.run.project
            updates = rec.run.config.update
        elif kind == "config":
            updates = rec.config.update
        else:
            continue
        config.update({u.key: json.loads(u.value_json) for u in updates})
    return run_id, project, config


@pytest.mark.slow
def test_wandb_honours_the_users_mode_and_project_logs_the_config_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb", reason="wandb not installed (monitor extra)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "my-project")
    run = tmp_path / "run"
    _feed(run, "wandb", range(3))
    run_id = (run / "wandb_run_id").read_text().strip()
    (first,) = list((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    got_id, project, config = _wandb_config(first)
    assert got_id == run_id and project == "my-project"
    assert config["seed"] == 7 and config["name"] == "cfgrun"
    assert config["policy"]["sampling"] == RUN_CONFIG["policy"]["sampling"]

    _feed(run, "wandb", range(3, 5))  # --resume: a new monitor on the same run directory
    assert (run / "wandb_run_id").read_text().strip() == run_id
    files = sorted((run / "wandb").glob("offline-run-*/*.wandb"))
    assert len(files) == 2 and all(f.name == f"run-{run_id}.wandb" for f in files)
    assert {_wandb_config(f)[0] for f in files} == {run_id}


def test_a_later_run_in_the_same_process_honours_the_users_wandb_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W&B reads WANDB_MODE once per process: a second run (a sweep, a notebook) set to offline must not
    fall back to logging in, and a mode W&B does not know is refused by name."""
    pytest.importorskip("wandb", reason="wandb not installed (monitor extra)")
    for var in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(var, raising=False)
    _feed(tmp_path / "first", "wandb", range(1))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "later")
    _feed(tmp_path / "second", "wandb", range(1))
    (file,) = list((tmp_path / "second" / "wandb").glob("offline-run-*/*.wandb"))
    assert _wandb_config(file)[1] == "later"
    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(ConfigError, match="WANDB_MODE='ofline' is not a W&B mode"):
        _feed(tmp_path / "third", "wandb", range(1))


@pytest.mark.slow
def test_wandb_is_offline_under_project_trialground_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb", reason="wandb not installed (monitor extra)")
    for var in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(var, raising=False)
    _feed(tmp_path, "wandb", range(2))
    (file,) = list((tmp_path / "wandb").glob("offline-run-*/*.wandb"))
    assert _wandb_config(file)[1] == "trialground"


# --- MLflow -------------------------------------------------------------------------------------------


def _mlflow_run(uri: str, experiment: str = "trialground") -> Any:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def test_mlflow_logs_the_config_as_params_and_resumes_the_same_run(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="mlflow not installed (monitor extra)")
    run = tmp_path / "run"
    _feed(run, "mlflow", range(3), notes="x" * 7000)
    uri = (run / "mlruns").resolve().as_uri()
    client, first = _mlflow_run(uri)
    params = first.data.params
    assert params["seed"] == "7" and params["name"] == "cfgrun"
    assert params["policy.sampling.temperature"] == str(RUN_CONFIG["policy"]["sampling"]["temperature"])
    assert params["notes"] == "x" * 6000  # cut to MLflow's value limit
    assert (run / "mlflow_run_id").read_text().strip() == first.info.run_id

    # --resume (a setting changed on the command line: params cannot change, the run goes on)
    _feed(run, "mlflow", range(3, 5), notes="y", extra_key="new")
    client, again = _mlflow_run(uri)  # still exactly one run
    assert again.info.run_id == first.info.run_id and again.info.status == "FINISHED"
    assert again.data.params["notes"] == "x" * 6000 and again.data.params["extra_key"] == "new"
    steps = [m.step for m in client.get_metric_history(again.info.run_id, "reward.mean")]
    assert sorted(steps) == [0, 1, 2, 3, 4]


def test_mlflow_tracking_uri_from_the_environment_or_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow", reason="mlflow not installed (monitor extra)")
    env_store, cfg_store = (tmp_path / "env-store").resolve(), (tmp_path / "cfg-store").resolve()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env_store.as_uri())
    _feed(tmp_path / "a", "mlflow", range(2))
    assert not (tmp_path / "a" / "mlruns").exists()
    _, run = _mlflow_run(env_store.as_uri())
    assert run.data.params["seed"] == "7"

    config = MonitorConfig(
        console=False, sinks=("mlflow",), mlflow=MlflowConfig(tracking_uri=cfg_store.as_uri(), experiment="x")
    )
    _feed(tmp_path / "b", "mlflow", range(2), config=config)  # the config key wins over the environment
    _, run = _mlflow_run(cfg_store.as_uri(), experiment="x")
    assert (tmp_path / "b" / "mlflow_run_id").read_text().strip() == run.info.run_id


# --- TensorBoard --------------------------------------------------------------------------------------


def _tb_events(logdir: Path) -> Iterator[Any]:
    from tensorboardX.proto.event_pb2 import Event

    for events in sorted(logdir.glob("events.out.tfevents.*")):
        data, pos = events.read_bytes(), 0
        while pos < len(data):  # TFRecord framing: u64 length, u32 crc, payload, u32 crc
            (n,) = struct.unpack("<Q", data[pos : pos + 8])
            yield Event.FromString(data[pos + 12 : pos + 12 + n])
            pos += 12 + n + 4


def test_tensorboard_logs_the_config_as_hparams_once(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX", reason="tensorboardX not installed (monitor extra)")
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    _feed(tmp_path, "tensorboard", range(4))
    _feed(tmp_path, "tensorboard", range(4, 6))  # a resumed run keeps the hparams it has
    values = [v for e in _tb_events(tmp_path / "tensorboard") for v in e.summary.value]
    tags = [v.tag for v in values]
    assert tags.count("_hparams_/experiment") == 1 and tags.count("_hparams_/session_start_info") == 1
    (start,) = [v for v in values if v.tag == "_hparams_/session_start_info"]
    hp = HParamsPluginData.FromString(start.metadata.plugin_data.content).session_start_info.hparams
    assert hp["seed"].number_value == 7 and hp["name"].string_value == "cfgrun"
    assert hp["policy.sampling.temperature"].number_value == RUN_CONFIG["policy"]["sampling"]["temperature"]
    (exp,) = [v for v in values if v.tag == "_hparams_/experiment"]
    metrics = HParamsPluginData.FromString(exp.metadata.plugin_data.content).experiment.metric_infos
    assert {m.name.tag for m in metrics} == {"reward/mean", "eval/pass_1"}  # as the scalars are stored
    assert ("reward/mean" in tags) and ("eval/pass_1" in tags)


# --- Prometheus ---------------------------------------------------------------------------------------


def test_prometheus_exports_reward_and_eval_by_default(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False, prometheus_port=0)) as mon:
        assert mon.prometheus is not None
        mon.observe(3, {"reward/mean": 0.4, "reward/mean/code": 0.25, "eval/pass@1": 0.3, "train/loss": 1.0})
        text = httpx.get(mon.prometheus.url, timeout=10).text
    assert "trialground_reward_mean 0.4" in text and "trialground_reward_mean_code 0.25" in text
    assert "trialground_eval_pass_at_1 0.3" in text
    assert "trialground_train_loss" not in text  # trainer metrics stay in the sinks


# --- A real run ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_run_records_its_config_in_every_sink_and_a_resume_continues_the_same_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart for one step then resumed for a second: the orchestrator hands the resolved config
    to the sinks, and the resumed run writes to the same W&B and MLflow runs."""
    pytest.importorskip("torch")
    for lib in ("wandb", "mlflow", "tensorboardX"):
        pytest.importorskip(lib, reason=f"{lib} not installed (monitor extra)")
    import asyncio

    from trialground.orchestrator.loop import run
    from trialground.orchestrator.run_config import load_config

    monkeypatch.setenv("WANDB_MODE", "offline")
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    sets = [
        "loop.eval_interval=0", "loop.probe_interval=0", "loop.batch_tasks=2", "loop.samples_per_task=2",
        "loop.checkpoint_interval=1", "tasks.num_train=20", "tasks.num_eval=2", "reward.canaries=0",
        "policy.sampling.max_new_tokens=8", "policy.eval_sampling.max_new_tokens=8",
        "monitor.sinks=[jsonl,wandb,mlflow,tensorboard]", "monitor.console=false",
        f"output_dir={tmp_path}", "name=sinks",
    ]  # fmt: skip
    asyncio.run(run(load_config(quickstart, [*sets, "loop.steps=1"])))
    run_dir = tmp_path / "sinks"
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()
    mlflow_id = (run_dir / "mlflow_run_id").read_text().strip()
    asyncio.run(run(load_config(quickstart, [*sets, "loop.steps=2"]), resume=True))

    assert (run_dir / "wandb_run_id").read_text().strip() == wandb_id
    files = sorted((run_dir / "wandb").glob("offline-run-*/*.wandb"))
    assert len(files) == 2 and all(f.name == f"run-{wandb_id}.wandb" for f in files)
    got_id, _, config = _wandb_config(files[0])
    assert got_id == wandb_id and config["name"] == "sinks" and config["loop"]["batch_tasks"] == 2
    client, mlrun = _mlflow_run((run_dir / "mlruns").resolve().as_uri())
    assert mlrun.info.run_id == mlflow_id and mlrun.data.params["loop.batch_tasks"] == "2"
    assert {m.step for m in client.get_metric_history(mlflow_id, "reward.mean")} >= {1, 2}
    tags = [v.tag for e in _tb_events(run_dir / "tensorboard") for v in e.summary.value]
    assert tags.count("_hparams_/experiment") == 1
