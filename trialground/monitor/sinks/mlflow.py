"""MLflow with a local file store under `<run>/mlruns/` (`mlflow ui --backend-store-uri <run>/mlruns`)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from trialground.monitor.sinks import finite, missing

_BAD = re.compile(r"[^A-Za-z0-9_\-.]")


def mlflow_key(key: str) -> str:
    """The MLflow name of metric `key`: `eval/pass@1` becomes `eval.pass_at_1`.

    The file store keeps each metric in a file whose path is the metric name, so a `/` in a name is a
    directory: `eval/n_tasks` (a file) and `eval/n_tasks/code` (a file under a directory of the same
    name) cannot both exist. Real runs emit such pairs, so `/` becomes `.`, which is never a path
    separator; any other character MLflow refuses becomes `_` (`@` reads `_at_`).
    """
    name = _BAD.sub("_", key.replace("@", "_at_").replace("/", "."))
    return name if name.strip(".") else "_" + name  # never `.` or `..`: those name directories


class MlflowSink:
    def __init__(self, store: Path, run_name: str, experiment: str = "trialground") -> None:
        # MLflow 3 keeps the file store in maintenance mode behind this switch; it is still the only
        # backend that needs no database, which is what a run directory wants.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing("mlflow", "mlflow") from exc
        store.mkdir(parents=True, exist_ok=True)
        self.uri = store.resolve().as_uri()
        self._client = MlflowClient(tracking_uri=self.uri)
        exp = self._client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else self._client.create_experiment(experiment)
        self.run_id: str = self._client.create_run(exp_id, run_name=run_name).info.run_id

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(k), v, now, step) for k, v in finite(metrics).items()]
        for i in range(0, len(batch), 1000):  # log_batch accepts at most 1000 metrics per call
            self._client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)
