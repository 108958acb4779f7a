"""Weights & Biases: the user's `WANDB_MODE`, `WANDB_PROJECT` and `WANDB_ENTITY`, offline by default.

Without `WANDB_MODE` the run is offline: it lands in `<run>/wandb/` and never touches the network
(`wandb sync <run>/wandb/offline-run-*` uploads it later). With `WANDB_MODE=online` it goes to the
server the user is logged in to. The project is `WANDB_PROJECT`, else `trialground`; the entity is
`WANDB_ENTITY`, else the account's default. The W&B run id is kept in `<run>/wandb_run_id`: a sink
opened again on the same run directory (`trialground train --resume`) continues that W&B run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from trialground.errors import ConfigError
from trialground.monitor.sinks import finite, missing

RUN_ID_FILE = "wandb_run_id"


_MODES: dict[str, Literal["online", "offline", "disabled", "shared"]] = {
    m: m for m in ("online", "offline", "disabled", "shared")
}


def _mode() -> Literal["online", "offline", "disabled", "shared"]:
    """`WANDB_MODE` when set (checked against W&B's modes), else offline."""
    name = os.environ.get("WANDB_MODE") or "offline"
    if name not in _MODES:
        raise ConfigError(f"WANDB_MODE={name!r} is not a W&B mode; use one of {', '.join(_MODES)}")
    return _MODES[name]


class WandbSink:
    """Logs every step's finite metrics, with the run's resolved config as the W&B run config."""

    def __init__(self, run_dir: Path, run_config: Mapping[str, Any] | None = None) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise missing("wandb", "wandb") from exc
        os.environ.setdefault("WANDB_SILENT", "true")
        id_file = run_dir / RUN_ID_FILE
        stored = id_file.read_text().strip() if id_file.is_file() else ""
        self._run = wandb.init(
            # the user's WANDB_MODE, read here rather than left to W&B: W&B reads the environment once per
            # process, so a second run in the same process (a sweep, a notebook) would miss a change
            mode=_mode(),
            dir=str(run_dir),
            project=os.environ.get("WANDB_PROJECT") or "trialground",
            entity=os.environ.get("WANDB_ENTITY") or None,
            name=run_dir.name,
            id=stored or None,
            resume="allow",
            config=dict(run_config) if run_config is not None else None,
            allow_val_change=True,  # a resumed run may have changed a setting (--set on resume)
            settings=wandb.Settings(console="off"),
        )
        self.run_id: str = self._run.id
        if stored != self.run_id:
            id_file.write_text(self.run_id + "\n")
        self.dir = Path(self._run.dir)

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(finite(metrics), step=step)

    def close(self) -> None:
        self._run.finish()
