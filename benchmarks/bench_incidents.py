"""Blind triage (issue 30): each incident of the catalog as a real job; only `rankscope report`.

For each incident (`rankscope.demo.incidents`) the benchmark starts the job's driver against one
local Ray cluster, waits for the faulty rank to mark its symptom's start, then runs only
`rankscope report --json --address A --job J` about every second until the report's
`data.diagnosis` is right (kind, culprit ranks and where) or `--limit` seconds pass. A small HTTP
server is the job's alert webhook (RANKSCOPE_ALERT_WEBHOOK): the first alert's receipt time,
against the symptom's, is the time to alert with no command run (waited for only for the kinds
that raise one). The healthy scenarios run last, all at once on a node of their own, each polled
every 5 s for 3 minutes (`--long`: 10), and count false findings (a "fail" diagnosis, or exit
1) and alerts.

Run: .venv/bin/python benchmarks/bench_incidents.py [--only a,b] [--client verl] [--json-out F]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rankscope.demo.incidents.catalog import catalog
from rankscope.demo.incidents.common import Incident
from rankscope.demo.incidents.job import JobRun, cluster_env, launch, start_cluster, tear_down
from rankscope.demo.incidents.judge import Poll, judge, names, report

HEALTHY_S = 180.0
HEALTHY_LONG_S = 600.0
POLL_S = 1.0
HEALTHY_POLL_S = 5.0
"""The healthy scenarios run together, each polled this often: about one report a second."""
HEALTHY_NODE_CPUS = 24
"""Logical CPUs of the node the healthy scenarios get: their ranks and helpers all fit."""
ALERTED_KINDS = frozenset(
    {"hang", "mismatch", "collective_failed", "cross_group_deadlock", "exception", "death",
     "oom", "straggler", "nan"}
)  # fmt: skip
"""The kinds issue 30 asks an alert for: only their incidents wait for one."""
ALERT_WAIT_S = 30.0
"""After a right verdict, how long from the symptom the job stays up for its first alert: a
hang is raised once its group waited 10 s, after a verdict that may come sooner."""


@dataclass
class Alert:
    received: float
    body: dict[str, Any]


@dataclass
class Webhook:
    """The jobs' alert webhook: every POST's JSON body and when it arrived."""

    alerts: list[Alert] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self) -> tuple[http.server.ThreadingHTTPServer, str]:
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received = time.time()
                length = int(self.headers.get("Content-Length", 0))
                with contextlib.suppress(ValueError):
                    body = json.loads(self.rfile.read(length) or b"{}")
                    with sink.lock:
                        sink.alerts.append(Alert(received, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/"

    def of_job(self, job_id: str) -> list[Alert]:
        with self.lock:
            return [a for a in self.alerts if a.body.get("job_id") == job_id]


@dataclass
class Result:
    name: str
    client: str
    expected: str
    healthy: bool
    job_id: str = ""
    symptom_at: float | None = None
    got: str = ""
    correct: bool = False
    t_verdict: float | None = None
    startup_s: float | None = None
    """From the driver's start to the symptom: the job's start-up and its healthy steps."""
    t_named: float | None = None
    """Until `data.diagnosis` exists: when the verdict sentence first named the culprit and
    where (a reader's check, not the score)."""
    t_alert: float | None = None
    alert: str = ""
    alert_names_culprit: bool | None = None
    """Whether the first alert is about the culprit rank (None: no alert, or no rank expected)."""
    polls: int = 0
    report_s: float = 0.0
    """The median time one `report` took."""
    false_findings: int = 0
    false_alerts: int = 0
    note: str = ""
    history: list[tuple[float, str]] = field(default_factory=list)
    """What the reports said, each change once: (s since the symptom or the start, text)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="incident names, comma-separated")
    parser.add_argument("--client", choices=("actors", "verl", "raytrain"), default=None)
    parser.add_argument("--limit", type=float, default=60.0, help="s to a right verdict")
    parser.add_argument("--long", action="store_true", help="healthy scenarios for 10 min")
    parser.add_argument("--healthy-s", type=float, default=None, help="healthy polling, s")
    parser.add_argument("--no-healthy", action="store_true", help="skip healthy scenarios")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (driver logs)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each report's change")
    parser.add_argument("--list", action="store_true", help="print the catalog and exit")
    args = parser.parse_args()

    chosen = catalog()
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(names) - {i.name for i in chosen})
        if unknown:
            parser.error(f"--only: unknown {', '.join(unknown)}")
        chosen = [i for i in chosen if i.name in names]
    if args.client:
        chosen = [i for i in chosen if i.client == args.client]
    if args.no_healthy:
        chosen = [i for i in chosen if not i.healthy]
    if args.list:
        for i in chosen:
            want = i.expected.describe() if i.expected else "no finding"
            print(f"{i.name:32} {i.client:9} {want}")
        return 0
    healthy_s = args.healthy_s or (HEALTHY_LONG_S if args.long else HEALTHY_S)

    tmp = tempfile.mkdtemp(prefix="rs-incidents-", dir="/tmp")
    webhook = Webhook()
    server, url = webhook.serve()
    cluster_env(tmp, url)
    started = time.time()
    cluster = start_cluster()
    results: list[Result] = []
    try:
        for incident in [i for i in chosen if not i.healthy]:
            print(f"--- {incident.name}: {incident.description}", flush=True)
            result = run_one(incident, cluster, tmp, webhook, args.limit, healthy_s)
            _print_result(result, args.verbose)
            results.append(result)
        healthy = [i for i in chosen if i.healthy]
        if healthy:
            results += run_healthy(healthy, cluster, tmp, webhook, healthy_s, args.verbose)
    finally:
        cluster.shutdown()
        server.shutdown()
        if args.keep:
            print(f"kept Ray's files, the run directory and each job's driver.log: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.time() - started
    print_scoreboard(results, total)
    load = os.getloadavg()
    cpus = os.cpu_count()
    print(f"load average at the end: {load[0]:.1f} (1 min), {load[2]:.1f} (15 min); {cpus} CPUs")
    if args.json_out:
        with open(args.json_out, "w") as f:
            out = {"seconds": total, "load_average": load, "results": [asdict(r) for r in results]}
            json.dump(out, f, indent=1)
    return 0


def _print_result(result: Result, verbose: bool) -> None:
    print(f"    {_row_text(result)}", flush=True)
    if verbose:
        for at, said in result.history:
            print(f"      {at:6.1f} s  {said[:300]}", flush=True)


def run_healthy(
    scenarios: list[Incident],
    cluster: Any,
    tmp: str,
    webhook: Webhook,
    seconds: float,
    verbose: bool,
) -> list[Result]:
    """The healthy scenarios all at once, on a node of their own beside the head: together
    they keep the whole run short, and each sees its neighbours' load as on a shared cluster."""
    print(f"--- healthy, together for {seconds:.0f} s: {', '.join(i.name for i in scenarios)}")
    cluster.add_node(num_cpus=HEALTHY_NODE_CPUS)
    cluster.wait_for_nodes()
    results: list[Result] = []
    lock = threading.Lock()

    def one(incident: Incident) -> None:
        result = run_one(incident, cluster, tmp, webhook, 0.0, seconds)
        with lock:
            print(f"--- {incident.name}: {incident.description}", flush=True)
            _print_result(result, verbose)
            results.append(result)

    threads = [threading.Thread(target=one, args=(i,)) for i in scenarios]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: [i.name for i in scenarios].index(r.name))


def run_one(
    incident: Incident, cluster: Any, tmp: str, webhook: Webhook, limit: float, healthy_s: float
) -> Result:
    want = incident.expected.describe() if incident.expected else "no fail"
    result = Result(incident.name, incident.client, want, incident.healthy)
    run = launch(incident, cluster, tmp)
    try:
        result.job_id = run.job_id
        if not result.job_id:
            result.note = "the driver printed no job id"
        elif incident.healthy:
            _watch_healthy(result, run.address, webhook, healthy_s)
        else:
            _watch_incident(result, run, webhook, limit)
            if result.symptom_at is not None:
                result.startup_s = result.symptom_at - run.launched
    finally:
        tear_down(run)
    return result


def _watch_incident(result: Result, run: JobRun, webhook: Webhook, limit: float) -> None:
    expected = run.incident.expected
    assert expected is not None
    at = run.wait_symptom()
    if at is None:
        result.note = "no symptom: the job ended or never started its fault"
        return
    result.symptom_at = at
    polls: list[Poll] = []
    while time.time() < at + limit:
        begun = time.time()
        poll = report(run.address, result.job_id)
        polls.append(poll)
        result.got = poll.said()
        _remember(result, poll.ended - at, result.got)
        if result.t_named is None and names(expected, poll.verdict):
            result.t_named = poll.ended - at
        if judge(expected, poll.diagnosis):
            result.correct = True
            result.t_verdict = poll.ended - at
            break
        time.sleep(max(0.0, POLL_S - (time.time() - begun)))
    time.sleep(1.0)  # an alert on its way
    wait = ALERT_WAIT_S if set(expected.kinds) & ALERTED_KINDS else 0.0
    while time.time() < at + wait and not [  # alerts come by themselves: wait for one
        a for a in webhook.of_job(result.job_id) if a.received >= at - 1.0
    ]:
        time.sleep(0.5)
    alerts = [a for a in webhook.of_job(result.job_id) if a.received >= at - 1.0]
    early = [a for a in webhook.of_job(result.job_id) if a.received < at - 1.0]
    if alerts:
        first = alerts[0]
        result.t_alert = first.received - at
        result.alert = _alert_text(first.body)
        if expected.ranks:
            result.alert_names_culprit = first.body.get("rank") in expected.ranks
    result.false_alerts = len(early)
    _poll_stats(result, polls)


def _watch_healthy(result: Result, address: str, webhook: Webhook, seconds: float) -> None:
    """From the job's start (its start-up included): every report, every alert, is false."""
    start = time.time()
    polls: list[Poll] = []
    worst = ""
    while time.time() < start + seconds:
        begun = time.time()
        poll = report(address, result.job_id)
        polls.append(poll)
        _remember(result, poll.ended - start, poll.said())
        level = (poll.diagnosis or {}).get("level")
        if poll.code == 1 or level == "fail":
            result.false_findings += 1
            worst = worst or poll.said()
        time.sleep(max(0.0, HEALTHY_POLL_S - (time.time() - begun)))
    alerts = webhook.of_job(result.job_id)
    result.false_alerts = len(alerts)
    if alerts:
        result.alert = _alert_text(alerts[0].body)
    result.got = worst or (polls[-1].said() if polls else "")
    result.correct = result.false_findings == 0 and not alerts
    _poll_stats(result, polls)


def _remember(result: Result, at: float, said: str) -> None:
    if not result.history or result.history[-1][1] != said:
        result.history.append((round(at, 1), said))


def _poll_stats(result: Result, polls: list[Poll]) -> None:
    result.polls = len(polls)
    if polls:
        result.report_s = statistics.median(p.seconds for p in polls)
    failed = [p for p in polls if p.code not in (0, 1)]
    if failed and not result.note:
        result.note = f"{len(failed)} report runs failed (exit {failed[-1].code})"


def _alert_text(body: dict[str, Any]) -> str:
    who = f"rank {body['rank']}" if body.get("rank") is not None else f"pid {body.get('pid')}"
    return f"{body.get('rule')} ({who})"


def _row_text(r: Result) -> str:
    if r.healthy:
        return (
            f"false findings {r.false_findings}/{r.polls}, false alerts {r.false_alerts} "
            f"{r.alert}; said: {r.got[:160]} {r.note}"
        )
    return (
        f"{'RIGHT' if r.correct else 'wrong'} t_verdict={_s(r.t_verdict)} "
        f"(sentence named it: {_s(r.t_named)}; start-up {_s(r.startup_s)}) "
        f"t_alert={_s(r.t_alert)} {r.alert}; said: {r.got[:160]} {r.note}"
    )


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def _p90(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]


def print_scoreboard(results: list[Result], total: float) -> None:
    print(
        "\n| incident | client | expected | got | correct | t_verdict | t_alert (rank) "
        "| sentence named it |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        if r.healthy:
            correct = (
                "yes" if r.correct else f"NO ({r.false_findings} fail, {r.false_alerts} alerts)"
            )
        else:
            correct = "yes" if r.correct else "no"
        got = r.got.replace("|", "/")[:120] + (f" [{r.note}]" if r.note else "")
        alert = f"{_s(r.t_alert)} {r.alert}".strip() if not r.healthy else r.alert or "-"
        print(
            f"| {r.name} | {r.client} | {r.expected} | {got} | {correct} | "
            f"{_s(r.t_verdict)} | {alert} | {_s(r.t_named)} |"
        )
    faults = [r for r in results if not r.healthy]
    right = [r for r in faults if r.correct]
    verdicts = [r.t_verdict for r in faults if r.t_verdict is not None]
    alerts = [r.t_alert for r in faults if r.t_alert is not None]
    named = [r.t_named for r in faults if r.t_named is not None]
    alerted = [r for r in faults if r.alert_names_culprit is not None]
    print(f"\ntop-1 right: {len(right)}/{len(faults)}")
    for label, xs in (
        ("symptom to right verdict", verdicts),
        ("symptom to alert", alerts),
        ("symptom to a sentence naming culprit and where (not scored)", named),
    ):
        if xs:
            print(
                f"{label}: median {statistics.median(xs):.1f} s, p90 {_p90(xs):.1f} s "
                f"({len(xs)} of {len(faults)})"
            )
        else:
            print(f"{label}: none")
    if alerted:
        right = sum(bool(r.alert_names_culprit) for r in alerted)
        print(f"first alert names the culprit rank: {right} of {len(alerted)}")
    healthy = [r for r in results if r.healthy]
    if healthy:
        print(
            f"healthy: {sum(r.false_findings for r in healthy)} false findings, "
            f"{sum(r.false_alerts for r in healthy)} false alerts over {len(healthy)} scenarios"
        )
    reports = [r.report_s for r in results if r.polls]
    if reports:
        print(f"one report: median {statistics.median(reports):.1f} s")
    print(f"whole run: {total / 60:.1f} min")


if __name__ == "__main__":
    sys.exit(main())
