"""Metric sinks: one module per backend behind a two-method interface.

`jsonl` is the default and needs nothing; `tensorboard`, `wandb` and `mlflow` import their libraries
lazily (install the extra of the same name, or `monitor` for all three) and fail with a clear
`ConfigError` when they are missing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from trialground.errors import ConfigError
from trialground.monitor.config import MlflowConfig

Param = str | int | float | bool


class Sink(Protocol):
    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record the metrics of one step."""

    def close(self) -> None:
        """Flush and release everything."""


def finite(metrics: Mapping[str, float]) -> dict[str, float]:
    """The finite numeric entries (backends other than JSONL cannot store NaN or text)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Param]:
    """A nested config as flat dotted keys (`policy.sampling.temperature`), for backends whose
    parameters are flat. Strings, numbers and booleans stay as they are; `None`, lists and empty
    mappings become their JSON text."""
    out: dict[str, Param] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten_config(value, prefix=f"{name}."))
        elif isinstance(value, str | int | float | bool):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str, sort_keys=True)
    return out


def open_sink(
    name: str,
    run_dir: Path,
    *,
    run_config: Mapping[str, Any] | None = None,
    mlflow: MlflowConfig | None = None,
) -> Sink:
    """The sink called `name`, writing under `run_dir`.

    `run_config` is the run's resolved configuration (`RunConfig` as a JSON-able dict): W&B stores it
    as the run config, MLflow as params, TensorBoard as hparams. A sink that keeps a remote run
    (W&B, MLflow) stores that run's id in `run_dir`, and continues the same run when it is opened
    again on the same directory (`--resume`).
    """
    if name == "jsonl":
        from trialground.monitor.sinks.jsonl import JsonlSink

        return JsonlSink(run_dir / "metrics.jsonl")
    if name == "tensorboard":
        from trialground.monitor.sinks.tensorboard import TensorBoardSink

        return TensorBoardSink(run_dir / "tensorboard", run_config=run_config)
    if name == "wandb":
        from trialground.monitor.sinks.wandb import WandbSink

        return WandbSink(run_dir, run_config=run_config)
    if name == "mlflow":
        from trialground.monitor.sinks.mlflow import MlflowSink

        return MlflowSink(run_dir, mlflow or MlflowConfig(), run_config=run_config)
    raise ConfigError(f"unknown metric sink {name!r}: expected jsonl, tensorboard, wandb or mlflow")


def missing(package: str, sink: str) -> ConfigError:
    return ConfigError(
        f"the {sink} sink needs the {package!r} package: pip install 'trialground[{sink}]' "
        f"(or drop {sink!r} from monitor.sinks)"
    )
