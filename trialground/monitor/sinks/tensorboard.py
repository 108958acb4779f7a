"""TensorBoard event files under `<run>/tensorboard/`: tensorboardX, or torch's writer when present."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trialground.monitor.sinks import finite, missing


def _writer_class() -> Any:
    try:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    except ImportError:
        pass
    try:
        from torch.utils.tensorboard import SummaryWriter as TorchWriter

        return TorchWriter
    except ImportError as exc:  # torch without the tensorboard package also lands here
        raise missing("tensorboardX", "tensorboard") from exc


class TensorBoardSink:
    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self._w = _writer_class()(logdir=str(logdir))

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in finite(metrics).items():
            self._w.add_scalar(key, value, global_step=step)
        self._w.flush()

    def close(self) -> None:
        self._w.close()
