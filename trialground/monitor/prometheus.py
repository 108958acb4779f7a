"""A Prometheus endpoint with the live metrics: pool, sandboxes, queue, rates, reward and evaluation.

Every metric whose key starts with one of the configured prefixes becomes a gauge named
`trialground_<key with non-alphanumerics as _>` (`pool/queue_depth` -> `trialground_pool_queue_depth`).
Also exported: `trialground_step` (last observed step) and `trialground_alerts_total{rule,action}`.
Live sources (`add_source(fn)`, e.g. the pool's stats) are called at every scrape, so their values are
current even between training steps; a source that raises is skipped for that scrape.
The server runs on its own thread with its own registry, so several monitors never collide.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trialground.errors import ConfigError
from trialground.monitor.alerts import Alert
from trialground.monitor.sinks import finite
from trialground.ports import listen_error

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
        self._live = _LiveCollector(self._gauges)
        self.registry.register(self._live)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            why = listen_error(host, port, exc, "monitor.prometheus_port")
            raise ConfigError(f"monitor.prometheus_port: {why}") from exc
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

    def add_source(self, source: Callable[[], Mapping[str, float]]) -> None:
        """Call `source()` at every scrape and export what it returns (all keys, not only the prefixes)."""
        self._live.sources.append(source)

    def count_alerts(self, alerts: Sequence[Alert]) -> None:
        for a in alerts:
            self._alerts.labels(rule=a.rule, action=a.action).inc()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _LiveCollector(Collector):
    """Gauges read from callables at scrape time. Keys already set through `update` are left to it."""

    def __init__(self, static: Mapping[str, Gauge]) -> None:
        self.sources: list[Callable[[], Mapping[str, float]]] = []
        self._static = static

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        for source in list(self.sources):
            try:
                values = finite(source())
            except Exception:  # a broken source must not break the scrape of everything else
                continue
            for key, value in values.items():
                name = prometheus_name(key)
                if name in self._static or name in seen:
                    continue
                seen.add(name)
                yield GaugeMetricFamily(name, f"trialground live metric {key}", value=value)
