"""A Prometheus endpoint with the live infrastructure metrics (pool, sandboxes, queue, rates).

Every metric whose key starts with one of the configured prefixes becomes a gauge named
`trialground_<key with non-alphanumerics as _>` (`pool/queue_depth` -> `trialground_pool_queue_depth`).
Also exported: `trialground_step` (last observed step) and `trialground_alerts_total{rule,action}`.
The server runs on its own thread with its own registry, so several monitors never collide.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from trialground.monitor.alerts import Alert
from trialground.monitor.sinks import finite

_BAD = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(key: str) -> str:
    return "trialground_" + _BAD.sub("_", key.replace("@", "_at_")).strip("_")


class PrometheusExporter:
    """Serves `/metrics` on host:port (port 0: a free port; read `.port`)."""

    def __init__(self, host: str, port: int, prefixes: Sequence[str]) -> None:
        self.prefixes = tuple(prefixes)
        self.registry = CollectorRegistry()
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()
        self._step = Gauge("trialground_step", "Last training step observed", registry=self.registry)
        self._alerts = Counter(
            "trialground_alerts", "Alerts raised", ["rule", "action"], registry=self.registry
        )
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.host = host
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def update(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Set the gauges of the exported keys in `metrics` (others are ignored)."""
        with self._lock:
            if step is not None:
                self._step.set(step)
            for key, value in finite(metrics).items():
                if not key.startswith(self.prefixes):
                    continue
                name = prometheus_name(key)
                gauge = self._gauges.get(name)
                if gauge is None:
                    gauge = Gauge(name, f"trialground metric {key}", registry=self.registry)
                    self._gauges[name] = gauge
                gauge.set(value)

    def count_alerts(self, alerts: Sequence[Alert]) -> None:
        for a in alerts:
            self._alerts.labels(rule=a.rule, action=a.action).inc()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
