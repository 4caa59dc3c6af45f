"""The watchdog: a rank stuck for `hang_timeout` writes one cluster-wide hang report.

It runs in its own thread (not the probe's, which must stay free to answer the report's own
questions). Triggers: the same collective running longer than `hang_timeout`, or no
`rankscope.step()` for that long after the first one. The first rank to notice claims the
report at the hub; the others only log. The report is written to the run directory before
the backend's timeout (10-30 min) kills the job and the evidence.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from rankscope.hang.recorder import collective_recorder, record_when_imported
from rankscope.runtime.probe import Probe, progress, register_startup
from rankscope.serialize import plain

log = logging.getLogger("rankscope")
WATCHDOG_THREAD_NAME = "rankscope-watchdog"


class Watchdog:
    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.timeout = probe.config.hang_timeout
        self.reports: list[str] = []
        """Paths of the reports this process wrote."""
        self._fired = False
        self._thread = threading.Thread(target=self._run, name=WATCHDOG_THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        interval = min(1.0, self.timeout / 4)
        while self.probe.alive:
            time.sleep(interval)
            try:
                self._check()
            except Exception as exc:  # contained: the job never sees the watchdog fail
                log.debug("rankscope watchdog: %s", exc)

    def _check(self) -> None:
        now = time.time()
        stuck = collective_recorder().in_flight(older_than=now - self.timeout)
        stalled = progress.step > 0 and now - progress.last_progress > self.timeout
        if stuck is None and not stalled:
            self._fired = False
            return
        if self._fired:
            return
        self._fired = True
        if stuck is not None:
            reason = (
                f"{stuck.op} #{stuck.seq} in group {stuck.group} has run for "
                f"{now - stuck.start:.0f} s (at {stuck.caller})"
            )
        else:
            reason = f"no rankscope.step() for {now - progress.last_progress:.0f} s"
        log.warning("rankscope watchdog: %s; writing a hang report", reason)
        path = self._report(reason)
        if path:
            log.warning("rankscope watchdog: hang report written to %s", path)

    def _report(self, reason: str) -> str | None:
        import ray

        from rankscope.context import get_context
        from rankscope.hang.collect import hang_report
        from rankscope.runtime.client import HubClient
        from rankscope.runtime.hub import find_hub

        hub = find_hub()
        job_id = get_context().job_id
        if hub is None or not ray.get(hub.claim.remote(job_id, "hang", self.timeout), timeout=30):
            return None  # another rank is writing it
        client = HubClient(hub)
        report = hang_report(
            client, job_id, client.probes(job_id), min_wait_s=min(self.timeout, 5.0)
        )
        name = f"hang-report-{time.strftime('%Y%m%d-%H%M%S')}.json"
        text = json.dumps({"reason": reason, "report": plain(report)}, indent=2, default=str)
        path: str = ray.get(hub.write_artifact.remote(job_id, name, text), timeout=30)
        self.probe.emit(
            "hang_report",
            {"path": path, "reason": reason, "findings": [f.message for f in report.findings]},
        )
        self.reports.append(path)
        return path


@register_startup
def _start_recording_and_watching(probe: Probe) -> None:
    """At the light level and above: record collectives and watch for hangs."""
    if probe.config.level == "off":
        return
    record_when_imported()
    Watchdog(probe).start()
