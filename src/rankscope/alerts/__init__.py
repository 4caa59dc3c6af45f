"""Alerts: rules over each rank's logs and memory, events in the run directory, a webhook, and
`rankscope alerts`."""

from rankscope.alerts.model import Alert, AlertSettings, RegexRule
from rankscope.alerts.rules import alert_on, configure_alerts

__all__ = ["Alert", "AlertSettings", "RegexRule", "alert_on", "configure_alerts"]
