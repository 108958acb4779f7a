"""TensorBoard event files under `<run>/tensorboard/`: tensorboardX, or torch's writer when present.

The run's resolved config is written once, as hparams (flat dotted keys, `HPARAMS` tab), when the
directory has no event file yet; a resumed run appends to the same directory and keeps them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trialground.monitor.sinks import finite, flatten_config, missing

# Metrics the HPARAMS tab shows next to each run's parameters (tag names as the writer stores them).
HPARAM_METRICS = ("reward/mean", "eval/pass@1")


def _writer() -> tuple[Any, Any, bool]:
    """(SummaryWriter class, its `hparams` summary function, whether it is tensorboardX)."""
    try:
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        return SummaryWriter, hparams, True
    except ImportError:
        pass
    try:
        from torch.utils.tensorboard import SummaryWriter as TorchWriter
        from torch.utils.tensorboard.summary import hparams as torch_hparams

        return TorchWriter, torch_hparams, False
    except ImportError as exc:  # torch without the tensorboard package also lands here
        raise missing("tensorboardX", "tensorboard") from exc


class TensorBoardSink:
    def __init__(self, logdir: Path, run_config: Mapping[str, Any] | None = None) -> None:
        self.logdir = logdir
        writer, hparams, is_tbx = _writer()
        fresh = not any(logdir.glob("events.out.tfevents.*"))
        # The file name holds the time in seconds: a writer reopened within that second (a quick
        # resume) would overwrite the file before it without a suffix of its own.
        self._w = writer(logdir=str(logdir), filename_suffix=f".{uuid.uuid4().hex[:8]}")
        self._session_end: Any = None
        if run_config is not None and fresh:
            # tensorboardX stores `eval/pass@1` as `eval/pass_1`: name the metric as it is stored
            tags = [re.sub(r"[^-/\w.]", "_", t) if is_tbx else t for t in HPARAM_METRICS]
            experiment, session_start, self._session_end = hparams(
                flatten_config(run_config), dict.fromkeys(tags, 0.0)
            )
            file_writer = self._w._get_file_writer()
            file_writer.add_summary(experiment)
            file_writer.add_summary(session_start)
            self._w.flush()

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in finite(metrics).items():
            self._w.add_scalar(key, value, global_step=step)
        self._w.flush()

    def close(self) -> None:
        if self._session_end is not None:
            self._w._get_file_writer().add_summary(self._session_end)
        self._w.close()
