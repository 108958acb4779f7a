"""Metric sinks: one module per backend behind a two-method interface.

`jsonl` is the default and needs nothing; `tensorboard`, `wandb` and `mlflow` import their libraries
lazily (install the extra of the same name, or `monitor` for all three) and fail with a clear
`ConfigError` when they are missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from trialground.errors import ConfigError


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


def open_sink(name: str, run_dir: Path) -> Sink:
    """The sink called `name`, writing under `run_dir`."""
    if name == "jsonl":
        from trialground.monitor.sinks.jsonl import JsonlSink

        return JsonlSink(run_dir / "metrics.jsonl")
    if name == "tensorboard":
        from trialground.monitor.sinks.tensorboard import TensorBoardSink

        return TensorBoardSink(run_dir / "tensorboard")
    if name == "wandb":
        from trialground.monitor.sinks.wandb import WandbSink

        return WandbSink(run_dir)
    if name == "mlflow":
        from trialground.monitor.sinks.mlflow import MlflowSink

        return MlflowSink(run_dir / "mlruns", run_name=run_dir.name)
    raise ConfigError(f"unknown metric sink {name!r}: expected jsonl, tensorboard, wandb or mlflow")


def missing(package: str, sink: str) -> ConfigError:
    return ConfigError(
        f"the {sink} sink needs the {package!r} package: pip install 'trialground[{sink}]' "
        f"(or drop {sink!r} from monitor.sinks)"
    )
