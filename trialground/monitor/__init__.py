"""trialground.monitor: metrics sinks, alert rules, cost, evaluation statistics, report and dashboard.

Names are imported on first use: `trialground.orchestrator.run_config` imports `monitor.config`, and
that must not pull scipy and the sinks into every command's start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trialground.monitor.alerts import Alert, Evidence, worst_action
    from trialground.monitor.config import MonitorConfig
    from trialground.monitor.monitor import Monitor

__all__ = ["Alert", "Evidence", "Monitor", "MonitorConfig", "worst_action"]

_HOME = {
    "Alert": "trialground.monitor.alerts",
    "Evidence": "trialground.monitor.alerts",
    "worst_action": "trialground.monitor.alerts",
    "MonitorConfig": "trialground.monitor.config",
    "Monitor": "trialground.monitor.monitor",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'trialground.monitor' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOME[name]), name)
