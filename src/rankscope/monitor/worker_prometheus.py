"""The Prometheus exporter: a small detached actor on the head node that reads the hub.

Off by default. `RANKSCOPE_PROMETHEUS_PORT=9464` in the workers' environment makes the first
probe start it (`start_exporter()` does the same by hand). Each scrape is one hub call
(`list_probes`) turned into `rankscope_*` gauges labelled `job`, `group`, `rank`, `node`, `role`;
no rank is asked anything. The hub itself (runtime/) knows nothing of it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from rankscope.runtime.probe import register_startup

__all__ = ["EXPORTER_NAME", "METRICS", "exporter_port", "start_exporter"]

log = logging.getLogger("rankscope")

EXPORTER_NAME = "rankscope_prometheus"
PORT_ENV = "RANKSCOPE_PROMETHEUS_PORT"
SCRAPE_TIMEOUT_S = 5.0
METRICS = {
    # name: (RankRow field, help)
    "rankscope_step": ("step", "The rank's last step (rankscope.step() calls)."),
    "rankscope_step_seconds": ("step_s", "Median wall time of the rank's recent steps."),
    "rankscope_tokens_per_second": ("tokens_per_s", "Median tokens/s of the recent steps."),
    "rankscope_loss": ("loss", "The loss the rank last reported."),
    "rankscope_grad_norm": ("grad_norm", "The gradient norm the rank last reported."),
    "rankscope_device_memory_used_bytes": ("device_used", "Device memory used."),
    "rankscope_device_memory_total_bytes": ("device_total", "Device memory in all."),
    "rankscope_host_memory_used_bytes": ("host_used", "The node's memory used."),
    "rankscope_collective_wait_seconds": ("wait_s", "Median collective wait of recent steps."),
    "rankscope_straggler_score": ("straggler", "Compute against the group's median rank."),
    "rankscope_last_arrival_share": ("last_arrival_share", "Share of collectives entered last."),
    "rankscope_alerts": ("alerts", "How many alerts the rank has now."),
}
LABELS = ("job", "group", "rank", "node", "role")


def exporter_port() -> int | None:
    """The port from RANKSCOPE_PROMETHEUS_PORT; None when unset or 0 (off)."""
    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        log.warning("rankscope: %s=%r is not a port; the exporter stays off", PORT_ENV, raw)
        return None
    return port if 0 < port < 65536 else None


class _HubCollector:
    """A prometheus_client collector: one hub call per scrape."""

    def collect(self) -> Iterator[Any]:
        import ray
        from prometheus_client.core import GaugeMetricFamily

        from rankscope.monitor.view import inputs_of, rank_rows
        from rankscope.runtime.hub import find_hub

        families = {
            name: GaugeMetricFamily(name, help_text, labels=LABELS)
            for name, (_, help_text) in METRICS.items()
        }
        hub = find_hub()
        probes = ray.get(hub.list_probes.remote(None), timeout=SCRAPE_TIMEOUT_S) if hub else []
        jobs: dict[str, list[Any]] = {}
        for p in probes:
            jobs.setdefault(p.context.job_id, []).append(p)
        for job_id, members in jobs.items():
            for row in rank_rows(inputs_of(members)):
                labels = [job_id, row.group, str(row.rank), row.node, row.role]
                for name, (field, _) in METRICS.items():
                    value = getattr(row, field)
                    if field == "alerts":
                        value = len(value)
                    if value is not None:
                        families[name].add_metric(labels, float(value))
        yield from families.values()

    def describe(self) -> list[Any]:
        return []  # no scrape at registration


class PrometheusExporter:
    """The actor: serves /metrics on `port` of the head node."""

    def __init__(self, port: int) -> None:
        from prometheus_client import start_http_server
        from prometheus_client.registry import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_HubCollector())
        start_http_server(port, registry=registry)
        self._port = port

    def port(self) -> int:
        return self._port


def start_exporter(port: int | None = None) -> Any:
    """Start (or find) the exporter on the head node; returns its actor handle, None when off.

    Example: `start_exporter(9464)`, then scrape `http://<head>:9464/metrics`.
    """
    import ray

    from rankscope.config import hub_namespace

    port = port if port is not None else exporter_port()
    if not port:
        return None
    actor = ray.remote(PrometheusExporter).options(
        name=EXPORTER_NAME,
        namespace=hub_namespace(),
        get_if_exists=True,
        lifetime="detached",
        num_cpus=0,
        resources={"node:__internal_head__": 0.001},
        runtime_env={"env_vars": {"RANKSCOPE_ROLE": "hub"}},  # no probe in the exporter
    )
    return actor.remote(port)


@register_startup
def _start_if_asked(probe: Any) -> None:
    """With RANKSCOPE_PROMETHEUS_PORT set, start the exporter once the probe reaches the hub."""
    port = exporter_port()
    if port is None:
        return

    def start() -> None:
        if probe.connected.wait(120.0):
            try:
                start_exporter(port)
            except Exception as exc:
                log.warning("rankscope: the Prometheus exporter did not start: %s", exc)

    threading.Thread(target=start, name="rankscope-prometheus-start", daemon=True).start()
