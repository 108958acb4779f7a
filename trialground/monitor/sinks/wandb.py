"""Weights & Biases in offline mode: runs land in `<run>/wandb/` and can be synced later (`wandb sync`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from trialground.monitor.sinks import finite, missing


class WandbSink:
    """Never talks to the network: mode is forced to offline."""

    def __init__(self, run_dir: Path, project: str = "trialground") -> None:
        try:
            import wandb
        except ImportError as exc:
            raise missing("wandb", "wandb") from exc
        os.environ.setdefault("WANDB_SILENT", "true")
        self._run = wandb.init(
            mode="offline",
            dir=str(run_dir),
            project=project,
            name=run_dir.name,
            settings=wandb.Settings(console="off"),
        )
        self.dir = Path(self._run.dir)

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(finite(metrics), step=step)

    def close(self) -> None:
        self._run.finish()
