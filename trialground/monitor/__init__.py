"""trialground.monitor: metrics sinks, alert rules, cost, evaluation statistics, report and dashboard."""

from trialground.monitor.alerts import Alert, Evidence, worst_action
from trialground.monitor.config import MonitorConfig
from trialground.monitor.monitor import Monitor

__all__ = ["Alert", "Evidence", "Monitor", "MonitorConfig", "worst_action"]
