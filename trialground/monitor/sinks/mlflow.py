"""MLflow: a tracking server when configured, else a local file store under `<run>/mlruns/`
(`mlflow ui --backend-store-uri <run>/mlruns`)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialground.monitor.config import MlflowConfig
from trialground.monitor.sinks import finite, flatten_config, missing

if TYPE_CHECKING:
    from mlflow.entities import Run

log = logging.getLogger(__name__)

RUN_ID_FILE = "mlflow_run_id"
_BAD = re.compile(r"[^A-Za-z0-9_\-.]")
# MLflow's limits (mlflow.utils.validation): params per log_batch, key and value lengths.
_MAX_PARAMS_PER_BATCH = 100
_MAX_KEY_LENGTH = 250
_MAX_VALUE_LENGTH = 6000


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
    """Logs every step's finite metrics to one MLflow run, with the resolved config as its params.

    The tracking URI is `config.tracking_uri`, else `MLFLOW_TRACKING_URI`, else the file store
    `<run>/mlruns`. The MLflow run id is kept in `<run>/mlflow_run_id`: a sink opened again on the same
    run directory (`trialground train --resume`) continues that run when the tracking store still has it.
    """

    def __init__(
        self, run_dir: Path, config: MlflowConfig, run_config: Mapping[str, Any] | None = None
    ) -> None:
        # MLflow 3 keeps the file store in maintenance mode behind this switch; it is still the only
        # backend that needs no database, which is what a run directory wants.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing("mlflow", "mlflow") from exc
        self.uri = config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
        if not self.uri:
            store = run_dir / "mlruns"
            store.mkdir(parents=True, exist_ok=True)
            self.uri = store.resolve().as_uri()
        self._client = MlflowClient(tracking_uri=self.uri)
        id_file = run_dir / RUN_ID_FILE
        resumed = self._existing_run(id_file.read_text().strip()) if id_file.is_file() else None
        if resumed is None:
            exp = self._client.get_experiment_by_name(config.experiment)
            exp_id = exp.experiment_id if exp else self._client.create_experiment(config.experiment)
            self.run_id: str = self._client.create_run(exp_id, run_name=run_dir.name).info.run_id
            id_file.write_text(self.run_id + "\n")
            logged: Mapping[str, str] = {}
        else:
            self.run_id = resumed.info.run_id
            self._client.update_run(self.run_id, status="RUNNING")
            logged = resumed.data.params
        if run_config is not None:
            self._log_params(config_params(run_config), logged)

    def _existing_run(self, run_id: str) -> Run | None:
        """The stored run, when this tracking store has it and it is not deleted; else None."""
        from mlflow.exceptions import MlflowException

        if not run_id:
            return None
        try:
            run = self._client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        return run if run.info.lifecycle_stage == "active" else None

    def _log_params(self, params: Mapping[str, str], logged: Mapping[str, str]) -> None:
        """MLflow params cannot change: a resumed run logs only the keys it does not have yet."""
        from mlflow.entities import Param

        changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
        if changed:
            log.warning("MLflow run %s keeps its original params for %s (params cannot change)",
                        self.run_id, ", ".join(changed))  # fmt: skip
        batch = [Param(k, v) for k, v in params.items() if k not in logged]
        for i in range(0, len(batch), _MAX_PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=batch[i : i + _MAX_PARAMS_PER_BATCH])

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(k), v, now, step) for k, v in finite(metrics).items()]
        for i in range(0, len(batch), 1000):  # log_batch accepts at most 1000 metrics per call
            self._client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def config_params(run_config: Mapping[str, Any]) -> dict[str, str]:
    """The resolved config as MLflow params: dotted keys (named like metrics, `mlflow_key`), values as
    text, both cut to MLflow's limits (250 characters a key, 6000 a value)."""
    return {
        mlflow_key(k)[:_MAX_KEY_LENGTH]: str(v)[:_MAX_VALUE_LENGTH]
        for k, v in flatten_config(run_config).items()
    }
