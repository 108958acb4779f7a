"""The Monitor: JSONL metrics, alerts.jsonl, flagged records, configurable actions, webhook, Prometheus."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from trialground.monitor import Alert, Monitor, MonitorConfig, worst_action
from trialground.monitor.alerts import read_alerts
from trialground.monitor.config import RulesConfig, ShiftRuleConfig
from trialground.monitor.sinks.jsonl import read_metrics


def spike(mon: Monitor, steps: int = 40, at: int = 30) -> list[Alert]:
    out: list[Alert] = []
    for s in range(steps):
        out += mon.observe(s, {"env/error_rate": 0.02 + 0.001 * (s % 3) + (0.4 if s >= at else 0.0)})
    return out


def test_jsonl_lines_have_step_time_and_metrics(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        mon.observe(0, {"reward/mean": 0.5, "train/loss": float("nan")})
        mon.observe(1, {"reward/mean": 0.6})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])  # strict JSON: NaN was written as null
    assert first["step"] == 0 and isinstance(first["time"], float) and first["reward/mean"] == 0.5
    assert first["train/loss"] is None
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1]


def test_alerts_file_exists_and_is_empty_without_alerts(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        for s in range(50):
            assert mon.observe(s, {"env/error_rate": 0.02, "reward/mean": 0.3}) == []
    assert (tmp_path / "alerts.jsonl").read_text() == ""


def test_alert_written_with_evidence_and_action_configurable(tmp_path: Path) -> None:
    rules = RulesConfig(
        env_anomaly=ShiftRuleConfig(keys=("env/error_rate",), direction="up", window=5, action="stop")
    )
    with Monitor(tmp_path, MonitorConfig(console=False, rules=rules)) as mon:
        alerts = spike(mon)
    assert [a.rule for a in alerts] == ["env_anomaly"]
    a = alerts[0]
    assert a.step == 30 and a.action == "stop" and a.severity == "critical"
    assert worst_action(alerts) == "stop"
    assert a.evidence.key == "env/error_rate" and a.evidence.statistic == "cusum"
    assert a.evidence.value > a.evidence.threshold == 6.0
    assert a.evidence.window == (26, 30) and math.isclose(a.evidence.values[-1], 0.42)
    assert read_alerts(tmp_path / "alerts.jsonl") == alerts


def test_disabled_rule_stays_quiet(tmp_path: Path) -> None:
    rules = RulesConfig(env_anomaly=ShiftRuleConfig(enabled=False, keys=("env/error_rate",)))
    with Monitor(tmp_path, MonitorConfig(console=False, rules=rules)) as mon:
        assert spike(mon) == []


def test_record_flagged(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False)) as mon:
        mon.record_flagged(3, "t1", ["test_tampering"], ["wrote conftest.py"])
        mon.record_flagged(4, "t2", ["early_exit"], {"exit": "sys.exit(0) before asserts"})
    rows = [json.loads(x) for x in (tmp_path / "flagged.jsonl").read_text().splitlines()]
    assert rows[0]["task_id"] == "t1" and rows[0]["flags"] == ["test_tampering"]
    assert rows[1]["evidence"] == {"exit": "sys.exit(0) before asserts"}


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def webhook_server() -> Iterator[tuple[str, list[dict[str, object]]]]:
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Collector.received
    server.shutdown()
    server.server_close()


def test_webhook_receives_alert_json(
    tmp_path: Path, webhook_server: tuple[str, list[dict[str, object]]]
) -> None:
    url, received = webhook_server
    with Monitor(tmp_path, MonitorConfig(console=False, webhook_url=url)) as mon:
        alerts = spike(mon)
    assert len(received) == len(alerts) == 1
    assert received[0]["rule"] == "env_anomaly"
    assert received[0]["evidence"]["statistic"] == "cusum"  # type: ignore[index]
    assert mon.errors == []


class _Slow(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(2.0)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def test_slow_webhook_does_not_stall_observe(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        with Monitor(tmp_path, MonitorConfig(console=False, webhook_url=url)) as mon:
            for s in range(30):
                mon.observe(s, {"env/error_rate": 0.02 + 0.001 * (s % 3)})
            t0 = time.perf_counter()
            assert len(mon.observe(30, {"env/error_rate": 0.5})) == 1
            assert time.perf_counter() - t0 < 1.5  # the webhook takes 2 s: observe did not wait for it
        assert mon.errors == []  # close() waited for the delivery
    finally:
        server.shutdown()
        server.server_close()


def test_webhook_failure_is_reported_not_raised(tmp_path: Path) -> None:
    with Monitor(tmp_path, MonitorConfig(console=False, webhook_url="http://127.0.0.1:9/nothing")) as mon:
        alerts = spike(mon)
    assert len(alerts) == 1 and mon.errors and "webhook" in mon.errors[0]
    assert read_alerts(tmp_path / "alerts.jsonl") == alerts


def test_prometheus_scraped_over_http(tmp_path: Path) -> None:
    cfg = MonitorConfig(console=False, prometheus_port=0)
    with Monitor(tmp_path, cfg) as mon:
        assert mon.prometheus is not None
        url = mon.prometheus.url
        mon.observe(
            7, {"pool/queue_depth": 12, "env/error_rate": 0.25, "reward/mean": 0.4, "eval/pass@1": 0.3}
        )
        mon.observe_live({"pool/active": 3, "sandbox/open": 5})
        text = httpx.get(url, timeout=10).text
        assert "trialground_pool_queue_depth 12.0" in text
        assert "trialground_env_error_rate 0.25" in text
        assert "trialground_pool_active 3.0" in text and "trialground_sandbox_open 5.0" in text
        assert "trialground_step 7.0" in text
        assert "trialground_reward_mean 0.4" in text and "trialground_eval_pass_at_1 0.3" in text
        spike(mon)
        text = httpx.get(url, timeout=10).text
        assert 'trialground_alerts_total{action="warn",rule="env_anomaly"} 1.0' in text
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=2)


def test_prometheus_live_source_read_at_scrape_time(tmp_path: Path) -> None:
    calls = {"n": 0}

    def pool_stats() -> dict[str, float]:
        calls["n"] += 1
        return {"pool/in_flight": float(calls["n"]), "sandbox/warm": 2.0}

    def broken() -> dict[str, float]:
        raise RuntimeError("pool gone")

    with Monitor(tmp_path, MonitorConfig(console=False, prometheus_port=0)) as mon:
        mon.add_live_source(broken)
        mon.add_live_source(pool_stats)
        assert mon.prometheus is not None
        first = httpx.get(mon.prometheus.url, timeout=10).text
        second = httpx.get(mon.prometheus.url, timeout=10).text
    assert "trialground_sandbox_warm 2.0" in first
    n1 = float(re.search(r"^trialground_pool_in_flight (\S+)$", first, re.M).group(1))  # type: ignore[union-attr]
    n2 = float(re.search(r"^trialground_pool_in_flight (\S+)$", second, re.M).group(1))  # type: ignore[union-attr]
    assert n2 > n1
