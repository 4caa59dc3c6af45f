"""The watchdog: a rank stuck for `hang_timeout` writes one cluster-wide hang report.

It runs in its own thread (not the probe's, which must stay free to answer the report's own
questions). Triggers: the same collective running longer than `hang_timeout`, or, after the
first `rankscope.step()`, `hang_timeout` of work without one. Work, not wall time: an RL
trainer's workers wait in Ray's task loop for minutes between calls while rollout runs
elsewhere, and a rank waiting for work is not hung (`activity.find_work` tells the two apart
from every thread's stack and the recorder's call in flight). Time spent waiting restarts the
count, so a rank idle for ten minutes whose next task stalls is reported `hang_timeout` into
that task. The first rank to notice claims the report at the hub; the others only log. The
report is written to the run directory before the backend's timeout (10-30 min) kills the job
and the evidence. While the level is switched live to `off` it checks nothing and writes no
report; back at `light`, the time without a step counts from then.

On ranks 0-3 the same thread runs the group's alert judge (`worker_group_judge`), every 2 s.

Cost: at most one stack capture per check interval (1 s, or `hang_timeout / 4`), none before
the first step and none while steps come faster than that. One check of a process with 30
threads holds the GIL for about 1 ms, 0.1% of one core at 1 check/s (docs/PERFORMANCE.md,
Runtime).
"""

from __future__ import annotations

import json
import logging
import threading
import time

from rankscope import level
from rankscope.context import RankContext
from rankscope.hang.worker_activity import find_work
from rankscope.hang.worker_group_judge import GroupJudge
from rankscope.hang.worker_recorder import (
    collective_recorder,
    oldest_call_start,
    record_when_imported,
)
from rankscope.runtime.probe import Probe, progress, register_startup
from rankscope.serialize import plain
from rankscope.stacks.worker import capture_threads

log = logging.getLogger("rankscope")
WATCHDOG_THREAD_NAME = "rankscope-watchdog"


class Watchdog:
    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.timeout = probe.config.hang_timeout
        self.reports: list[str] = []
        """Paths of the reports this process wrote."""
        self.triggers: list[tuple[float, str]] = []
        """When and why it fired, each time (also when another rank had claimed the report)."""
        self.last_check = time.time()
        self.busy_since: float | None = None
        """Start of the work without a step going on now: the last step, or the first check
        that found the process busy after one that found it waiting; None while it waits."""
        self.work: str | None = None
        """What the last stack capture found the process doing (None: waiting, or not taken)."""
        self._seen_step = 0
        self._fired = False
        self.judge = GroupJudge()
        self._thread = threading.Thread(target=self._run, name=WATCHDOG_THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        interval = check_interval(self.timeout)
        while self.probe.alive:
            time.sleep(interval)
            try:
                self._check()
            except Exception as exc:  # contained: the job never sees the watchdog fail
                log.debug("rankscope watchdog: %s", exc)
            if level.RECORDING:
                self.judge.tick()  # ranks 0-3: the group's hangs and deaths as alerts

    def _check(self) -> None:
        now = time.time()
        if not level.RECORDING:  # switched live to `off`: no report; count afresh once back
            self.busy_since, self.work, self.last_check = None, None, now
            self._seen_step = progress.step
            return
        stuck = collective_recorder().in_flight(older_than=now - self.timeout)
        busy_s = self._busy_without_step(now)
        self.last_check = now
        stalled = busy_s > self.timeout
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
            work = self.work or find_work(capture_threads(), None) or "working since its last step"
            reason = (
                f"no rankscope.step() for {now - progress.last_progress:.0f} s, the last "
                f"{busy_s:.0f} s of them busy: {work}"
            )
        self.triggers.append((now, reason))
        log.warning("rankscope watchdog: %s; writing a hang report", reason)
        path = self._report(reason)
        if path:
            log.warning("rankscope watchdog: hang report written to %s", path)

    def _busy_without_step(self, now: float) -> float:
        """Seconds this rank has been working (not waiting for work) without a step."""
        step = progress.step
        if step == 0:  # no step yet: the job has not started training
            self.busy_since, self.work = None, None
            return 0.0
        if step != self._seen_step:  # stepped since the last check: it was working then
            self._seen_step, self.work = step, None
            self.busy_since = max(progress.last_progress, self.last_check)
            return now - self.busy_since
        # ~1 ms of GIL with 30 threads (the module docstring), once per check at most
        self.work = find_work(capture_threads(), collective_recorder().in_flight(older_than=now))
        if self.work is None:  # waiting for work: the count starts again when work comes
            self.busy_since = None
            return 0.0
        if self.busy_since is None:
            self.busy_since = now
        return now - self.busy_since

    def _report(self, reason: str) -> str | None:
        import ray

        from rankscope.context import get_context
        from rankscope.hang.collect import hang_report
        from rankscope.runtime.client import HubClient
        from rankscope.runtime.hub import find_hub

        hub = find_hub()
        context = get_context()
        job_id, key = context.job_id, report_claim(context)
        if hub is None or not ray.get(hub.claim.remote(job_id, key, self.timeout), timeout=30):
            return None  # another rank of the group is writing it
        client = HubClient(hub)
        group = [p for p in client.probes(job_id, []) if p.context.group == context.group]
        report = hang_report(
            client, job_id, group, min_wait_s=min(self.timeout, 5.0), group=context.group
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


def report_claim(context: RankContext) -> str:
    """The hub's claim a watchdog takes before it writes a report: one report per group per
    `hang_timeout`, not one per rank. Per group, not per job: verl runs several worker groups
    in one job, and a group hung for a long timeout must not silence another's report. A rank
    whose group is unknown (an explicit rank, no rendezvous) reports for its own process: the
    ranks of the job that share no group must not share one claim either."""
    if context.group:
        return f"hang:{context.group}"
    return f"hang:process:{context.node_id}:{context.pid}"


def check_interval(hang_timeout: float) -> float:
    """Seconds between two checks: a report comes at most this late."""
    return min(1.0, hang_timeout / 4)


_current: Watchdog | None = None


def current_watchdog() -> Watchdog | None:
    """This process's watchdog, once its probe started one."""
    return _current


@register_startup
def _start_recording_and_watching(probe: Probe) -> None:
    """At the light level and above: record collectives (and say in every answer since when
    the oldest one still running runs) and watch for hangs."""
    global _current
    if probe.config.level == "off":
        return
    record_when_imported()
    progress.waiting = oldest_call_start
    _current = Watchdog(probe)
    _current.start()
