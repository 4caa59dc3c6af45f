"""Alerts: rules over each rank's logs and memory, events in the run directory, a webhook, and
`rankscope alerts`."""

from rankscope.alerts import worker as _worker  # noqa: F401  (registers the probe's alert commands)
from rankscope.alerts.api import alert_on, configure_alerts
from rankscope.alerts.model import Alert, AlertSettings, RegexRule

__all__ = ["Alert", "AlertSettings", "RegexRule", "alert_on", "configure_alerts"]
