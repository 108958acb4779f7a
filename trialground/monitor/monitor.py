"""The `Monitor`: one object the training loop feeds every step.

    monitor = Monitor(run_dir, config.monitor)
    alerts = monitor.observe(step, metrics)           # sinks + cost + Prometheus + alert rules
    if worst_action(alerts) == "stop": ...
    monitor.record_flagged(step, task_id, ["test_tampering"], ["wrote conftest.py"])
    monitor.record_regressions(step, task_ids, reason="eval_failure")
    monitor.close()

Files it owns in the run directory: `metrics.jsonl` (via the jsonl sink), `alerts.jsonl` (created at
once, empty until an alert fires), `flagged.jsonl`, `regressions.jsonl`, plus the optional sinks'
folders (`tensorboard/`, `wandb/`, `mlruns/`) and run ids (`wandb_run_id`, `mlflow_run_id`).

A sink never ends a run: one that raises while writing is closed and dropped, reported once (a log
warning, a `sink_failed` alert in `alerts.jsonl` and on the console, and the metric
`monitor/sinks_failed` on every later step), and the other sinks go on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console

from trialground.monitor.alerts import Alert, AlertLog, Evidence, Webhook, print_alerts, read_alerts
from trialground.monitor.config import MonitorConfig
from trialground.monitor.correlation import correlation_metrics
from trialground.monitor.cost import CostMeter
from trialground.monitor.history import MetricHistory
from trialground.monitor.prometheus import PrometheusExporter
from trialground.monitor.regressions import RegressionLog
from trialground.monitor.rules import Rule, build_rules
from trialground.monitor.sinks import Sink, open_sink
from trialground.monitor.sinks.jsonl import read_metrics

log = logging.getLogger(__name__)


class Monitor:
    """Writes metrics to the configured sinks and evaluates the alert rules, step by step."""

    def __init__(
        self,
        run_dir: str | Path,
        config: MonitorConfig | None = None,
        *,
        console: Console | None = None,
        run_config: Mapping[str, Any] | None = None,
    ) -> None:
        """`run_config` is the run's resolved configuration (`RunConfig.model_dump(mode="json")`): the
        W&B, MLflow and TensorBoard sinks record it with the run."""
        self.run_dir = Path(run_dir)
        self.config = config or MonitorConfig()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.alert_log = AlertLog(self.run_dir / "alerts.jsonl")
        self.regressions = RegressionLog(self.run_dir / "regressions.jsonl")
        self.history = MetricHistory(self.config.history)
        self.rules: list[Rule] = build_rules(self.config.rules)
        self.cost = CostMeter(self.config.cost)
        self.console = console or Console(stderr=True)
        self.errors: list[str] = []  # webhook and sink-close failures (complete after close()): never fatal
        self._flagged_path = self.run_dir / "flagged.jsonl"
        self._sinks: list[tuple[str, Sink]] = []
        self.failed_sinks: dict[str, str] = {}  # sink name -> the error that disabled it
        self._webhook = (
            Webhook(self.config.webhook_url, self.config.webhook_timeout_s, on_error=self._webhook_failed)
            if self.config.webhook_url
            else None
        )
        self.prometheus: PrometheusExporter | None = None
        try:
            for name in dict.fromkeys(self.config.sinks):
                sink = open_sink(name, self.run_dir, run_config=run_config, mlflow=self.config.mlflow)
                self._sinks.append((name, sink))  # one by one: close() sees them
            if self.config.prometheus_port is not None:
                self.prometheus = PrometheusExporter(
                    self.config.prometheus_host, self.config.prometheus_port, self.config.prometheus_prefixes
                )
        except BaseException:
            self.close()
            raise
        self._closed = False

    def add_sink(self, name: str, sink: Sink) -> None:
        """Also write every later step to `sink` (a custom backend); it fails like the built-in ones."""
        self._sinks.append((name, sink))

    def observe(self, step: int, metrics: Mapping[str, float]) -> list[Alert]:
        """Record one step's metrics everywhere and return the alerts it raised (already dispatched).

        Cost metrics (`cost/...`) are added when the resource keys are present (see `cost.py`).
        """
        row = dict(metrics)
        row.update(self.cost.update(row))
        if self.failed_sinks:
            row["monitor/sinks_failed"] = float(len(self.failed_sinks))
        self.history.add(step, row)
        derived = correlation_metrics(self.history, self.config.rules.reward_eval_divergence)
        self.history.add(step, derived, more=True)
        row.update(derived)
        alerts: list[Alert] = []
        for name, sink in list(self._sinks):
            try:
                sink.write(step, row)
            except Exception as exc:  # any backend error: this sink is done, the run is not
                alerts.append(self._disable_sink(step, name, sink, exc))
        if self.prometheus is not None:
            self.prometheus.update(row, step=step)
        alerts += [a for rule in self.rules for a in rule.check(step, self.history)]
        self._dispatch(alerts)
        return alerts

    def resume(self, step: int) -> None:
        """Continue a run resumed from its checkpoint at `step`: the metric history the rules read, the
        cumulative cost and each rule's cooldowns come back from `metrics.jsonl` and `alerts.jsonl` as of
        that step, and alerts raised after it (by the run that was cut off) are forgotten, so a resumed
        run alarms exactly as the uninterrupted one would. Call before the first `observe`."""
        metrics_path = self.run_dir / "metrics.jsonl"
        for row in read_metrics(metrics_path) if metrics_path.is_file() else []:
            if row.get("step", step + 1) <= step:
                values = {k: v for k, v in row.items() if k not in ("step", "time")}
                self.cost.update(values)
                self.history.add(int(row["step"]), values)
        kept = [a for a in read_alerts(self.alert_log.path) if a.step <= step]
        self.alert_log.path.write_text("".join(a.model_dump_json() + "\n" for a in kept))
        rules = {rule.name: rule for rule in self.rules}
        for alert in kept:
            if alert.rule in rules:
                rules[alert.rule].resume(alert)
        self.history.updated = set()

    def _disable_sink(self, step: int, name: str, sink: Sink, exc: Exception) -> Alert:
        """Drop a sink whose write failed, once, and say so everywhere but in that sink."""
        error = f"{type(exc).__name__}: {exc}"
        self._sinks = [(n, s) for n, s in self._sinks if s is not sink]
        self.failed_sinks[name] = error
        log.warning("metric sink %r failed at step %d and is disabled for the rest of the run: %s",
                    name, step, error)  # fmt: skip
        self._close_sink(name, sink)
        evidence = Evidence(
            key=name, values=(), window=(step, step), statistic="sink_error", value=1.0, threshold=0.0,
            details={"error": error[:2000]},
        )  # fmt: skip
        return Alert.make(
            "sink_failed", "warn", step, f"metric sink {name!r} failed and is disabled: {error}", evidence
        )

    def _close_sink(self, name: str, sink: Sink) -> None:
        try:
            sink.close()
        except Exception as exc:  # a broken backend may fail to close too; nothing more to save there
            self.errors.append(f"closing metric sink {name!r}: {type(exc).__name__}: {exc}")
            log.warning("closing metric sink %r failed: %s", name, exc)

    def observe_live(self, metrics: Mapping[str, float]) -> None:
        """Update the Prometheus gauges between steps (pool and sandbox gauges); nothing is written."""
        if self.prometheus is not None:
            self.prometheus.update(metrics)

    def add_live_source(self, source: Callable[[], Mapping[str, float]]) -> None:
        """Export `source()` (e.g. the environment pool's stats) at every Prometheus scrape."""
        if self.prometheus is not None:
            self.prometheus.add_source(source)

    def record_flagged(
        self,
        step: int,
        task_id: str,
        flags: Sequence[str],
        evidence: Sequence[str] | Mapping[str, str] | str = (),
    ) -> None:
        """Append one flagged trajectory to `flagged.jsonl` (read by the report and the regression loop)."""
        if isinstance(evidence, str):
            ev: list[str] | dict[str, str] = [evidence]
        elif isinstance(evidence, Mapping):
            ev = {str(k): str(v) for k, v in evidence.items()}
        else:
            ev = [str(e) for e in evidence]
        row = {"step": step, "time": time.time(), "task_id": task_id, "flags": list(flags), "evidence": ev}
        with self._flagged_path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def record_regressions(self, step: int, task_ids: Sequence[str], reason: str, detail: str = "") -> None:
        """Log tasks sent to the pool's regression queue (see `regressions.py` for the file format)."""
        for task_id in task_ids:
            self.regressions.queued(step, task_id, reason, detail)

    def _dispatch(self, alerts: list[Alert]) -> None:
        if not alerts:
            return
        self.alert_log.write(alerts)
        if self.config.console:
            print_alerts(self.console, alerts)
        if self.prometheus is not None:
            self.prometheus.count_alerts(alerts)
        if self._webhook is not None:
            self._webhook.send(alerts)

    def _webhook_failed(self, err: str) -> None:
        self.errors.append(err)
        self.console.print(f"[yellow]warning:[/] {err}", highlight=False)

    def close(self) -> None:
        """Flush and close every sink, stop the Prometheus server. Safe to call twice."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        for name, sink in self._sinks:
            self._close_sink(name, sink)
        if self.prometheus is not None:
            self.prometheus.close()
        if self._webhook is not None:
            self._webhook.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
