"""Alerts and where they go: `alerts.jsonl` (always), the console (rich), optionally a webhook.

An `Alert` is frozen data: which rule fired, on which step, what the training loop should do
(`action`: warn, pause, stop) and the evidence — the values tested, the window, the statistic and the
threshold it crossed. One alert is one JSON line in `alerts.jsonl`.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from trialground.monitor.config import Action

Severity = Literal["info", "warning", "critical"]
_SEVERITY: dict[str, Severity] = {"warn": "warning", "pause": "critical", "stop": "critical"}
_ORDER = {"warn": 0, "pause": 1, "stop": 2}


class Evidence(BaseModel):
    """What triggered an alert: the values tested, their window, the test statistic and its threshold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="Metric key (or keys, comma-separated) tested")
    values: tuple[float, ...] = Field(description="The recent values tested")
    window: tuple[int, int] = Field(description="First and last step of the tested values")
    statistic: str = Field(description="Name of the deciding statistic, e.g. cusum, mann_kendall_p")
    value: float = Field(description="Its value")
    threshold: float = Field(description="The threshold it crossed")
    details: dict[str, float | str] = Field(default_factory=dict, description="Further statistics")


class Alert(BaseModel):
    """One fired rule. `action` tells the training loop what to do: warn, pause or stop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str
    severity: Severity
    action: Action
    step: int
    message: str
    evidence: Evidence
    time: float = Field(default_factory=time.time)

    @classmethod
    def make(cls, rule: str, action: Action, step: int, message: str, evidence: Evidence) -> Alert:
        return cls(
            rule=rule,
            severity=_SEVERITY[action],
            action=action,
            step=step,
            message=message,
            evidence=evidence,
        )


def worst_action(alerts: Iterable[Alert]) -> Action | None:
    """The most drastic action among `alerts` (stop > pause > warn), None when there are none."""
    worst: Action | None = None
    for a in alerts:
        if worst is None or _ORDER[a.action] > _ORDER[worst]:
            worst = a.action
    return worst


class AlertLog:
    """Appends alerts to `alerts.jsonl`; the file exists from construction on, empty until one fires."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)

    def write(self, alerts: Sequence[Alert]) -> None:
        if not alerts:
            return
        with self.path.open("a") as f:
            for a in alerts:
                f.write(a.model_dump_json() + "\n")


def read_alerts(path: Path) -> list[Alert]:
    """Alerts of a run, skipping lines that do not parse (a run killed mid-write)."""
    if not path.is_file():
        return []
    out: list[Alert] = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(Alert.model_validate_json(line))
            except ValueError:
                continue
    return out


_STYLE = {"info": "cyan", "warning": "yellow", "critical": "bold red"}


def print_alerts(console: Console, alerts: Sequence[Alert]) -> None:
    for a in alerts:
        ev = a.evidence
        console.print(
            f"[{_STYLE[a.severity]}]ALERT[/] step {a.step} [bold]{a.rule}[/] ({a.action}): {a.message} "
            f"[dim]{ev.statistic}={ev.value:.4g} threshold={ev.threshold:.4g} "
            f"steps {ev.window[0]}..{ev.window[1]}[/]",
            highlight=False,
        )


class Webhook:
    """POSTs each alert as JSON from a background thread, so a slow endpoint never stalls training.

    Failures are collected in `errors` (and passed to `on_error`), never raised. `close()` waits up to
    `drain_s` for queued alerts to go out.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 5.0,
        *,
        on_error: Callable[[str], None] | None = None,
        drain_s: float = 10.0,
    ) -> None:
        self.url = url
        self.errors: list[str] = []
        self._on_error = on_error
        self._drain_s = drain_s
        self._client = httpx.Client(timeout=timeout_s)
        self._queue: queue.Queue[Alert | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="alert-webhook", daemon=True)
        self._thread.start()

    def send(self, alerts: Sequence[Alert]) -> None:
        for a in alerts:
            self._queue.put(a)

    def _run(self) -> None:
        while (a := self._queue.get()) is not None:
            payload: dict[str, Any] = json.loads(a.model_dump_json())
            try:
                self._client.post(self.url, json=payload).raise_for_status()
            except httpx.HTTPError as exc:
                err = f"webhook {self.url}: {type(exc).__name__}: {exc}"
                self.errors.append(err)
                if self._on_error is not None:
                    self._on_error(err)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=self._drain_s)
        self._client.close()
