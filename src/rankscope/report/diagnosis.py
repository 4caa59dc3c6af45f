"""The verdict as data: of everything the run shows, the one root cause, and who, where, why.

Pure: the run's data in, one `Diagnosis` out (or None). A failure has consequences that every
feature sees too: a rank raises, its peers' collectives fail and the client tears the group
down; a rank dies, its peers fail in the collective it left. So the order is the causal one:
a rank's own exception or the first death, unless a hang came first (then the hang is the
story and the deaths follow it); then the sections in `VERDICT_ORDER`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from rankscope.hang.motion import PROGRESS, SLOW_LIMIT_S
from rankscope.report.hang_before_deaths import hang_before_deaths
from rankscope.report.layout import process_label
from rankscope.report.model import Diagnosis, DiagnosisKind, RunData, Section, Severity
from rankscope.report.section_diagnosis import (
    from_hang,
    from_section,
    hang_group,
    rank_places,
    ranks_text,
)

__all__ = [
    "PACE_KINDS",
    "VERDICT_ORDER",
    "WAITS_FOR",
    "diagnose",
    "is_consequence",
    "own_errors",
    "slow_culprits",
]

VERDICT_ORDER = (
    "hang",
    "stacks",
    "ranks",
    "pending",
    "consistency",
    "memory",
    "monitor",
    "alerts",
    "logs",
    "trace",
    "debug",
    "environment",
)
"""Whose finding becomes the page's first sentence, after exceptions and deaths: a hang
explains the deaths that follow it, and an OOM or a leak (hard evidence) goes before the
monitors' softer signals such as a rank at 1.4x its own best, which a leaking rank's swapping
can itself cause. Work no node can host is hard evidence too: what waits for it never starts."""
TASK_ERROR = "task_error"
"""The event a probe sends at once when a task, actor method or training loop raises."""
CONSEQUENCE_TYPES = frozenset(
    {
        "RayTaskError",
        "RayActorError",
        "ActorDiedError",
        "ActorUnavailableError",
        "WorkerCrashedError",
        "OwnerDiedError",
        "ObjectLostError",
        "TaskCancelledError",
        "RaySystemError",
        "DistBackendError",
        "DistNetworkError",
        "DistStoreError",
    }
)
"""Exceptions that report another process's failure (Ray's error for a task or actor that
failed elsewhere, torch.distributed's for a peer gone): what followed, never the cause."""
PEER_GONE = re.compile(
    r"connection closed by peer|connection reset by peer|broken pipe|timed out|timeout"
    r"|communicator was aborted|process group .* (?:aborted|shut ?down)|actor died"
    r"|the actor is dead|worker crashed|socket closed",
    re.IGNORECASE,
)
"""A collective's error when a peer left or never came: the peer is the story."""
EARLIER_SLACK_S = 1.0
"""A death counts as before an exception (or the group judge's alert) only when it is this much
earlier: those reach the hub at once, while a death is dated by Ray or by the last heartbeat."""
_OOM = re.compile(r"out of memory|\boom\b|memory monitor|memory usage", re.IGNORECASE)
SILENT_S = 5.0
"""A process the hub still holds alive but last heard this much before the job's most recently
heard one is silent: gone with its node (Ray declares a lost node dead only once its health
checks have failed, 15-30 s later), or stopped. It counts as a death when its peers' failures
or deaths point at it."""
KILLED_BY_CONTROLLER = "ray.kill"
"""A death Ray explains as `ray.kill`: a controller or driver ended it after another failed."""


def diagnose(sections: Sequence[Section], data: RunData) -> Diagnosis | None:
    """The root cause of what the sections found, or None when nothing failed."""
    places = rank_places(data.stacks)
    found = _root_failure(data, places)
    if found is not None:
        return found
    by_key = {s.key: s for s in sections}
    moving = slow_culprits(data)
    slow: Diagnosis | None = None
    for key in [*VERDICT_ORDER, *(k for k in by_key if k not in VERDICT_ORDER)]:
        section = by_key.get(key)
        if section is None or not section.findings:
            continue
        found = from_section(section, data, places)
        if key in WAITS_FOR and moving:
            slow = slow or _slow(found, data, places, moving)
            continue  # a failure elsewhere (a straggler's finding) is the verdict, if any
        if slow is not None and found.kind in PACE_KINDS and not set(moving.values()) <= PROGRESS:
            continue  # a pace from before: the slow rank is busy in its own code now
        return found
    return slow


PACE_KINDS = frozenset({DiagnosisKind.STRAGGLER, DiagnosisKind.THROUGHPUT_DRIFT})
"""Findings about the ranks' pace. They explain a group that waits for a rank only while that
rank still steps or completes collectives: a rank that moves only in its own code (its call
stack, its storage) keeps the straggler finding of its earlier steps, which says nothing of
why its group waits now."""


WAITS_FOR = ("hang", "stacks")
"""Sections whose finding is a group waiting for a rank: it may be slow rather than stuck."""


def slow_culprits(data: RunData) -> dict[tuple[str | None, int], str]:
    """(group, rank) -> what moved, when every rank the hang and stacks findings wait for
    moved while the report looked and no group has waited SLOW_LIMIT_S; else empty."""
    ids = {
        (p["info"]["context"].get("group"), p["info"]["context"].get("rank")): p["info"]["probe_id"]
        for p in data.processes
    }
    culprits: set[tuple[str | None, int]] = set()
    for report in data.hang:
        for f in report.get("findings", ()):
            group = hang_group(report, f, data)
            culprits.update((group, int(r)) for r in f.get("ranks") or ())
    for report in data.stacks:
        for f in report.get("findings", ()):
            culprits.update((f.get("group"), int(r)) for r in f.get("elsewhere") or ())
    if not culprits or _longest_wait(data) >= SLOW_LIMIT_S:
        return {}
    moving = {c: data.moving.get(ids.get(c, ""), "") for c in culprits}
    return moving if all(moving.values()) else {}


def _longest_wait(data: RunData) -> float:
    return max(
        (
            float(m.get("waited_s") or 0.0)
            for report in data.stacks
            for g in report.get("groups", ())
            for m in g.get("members", ())
        ),
        default=0.0,
    )


def _slow(
    found: Diagnosis,
    data: RunData,
    places: Mapping[tuple[str | None, int], str],
    moving: Mapping[tuple[str | None, int], str],
) -> Diagnosis:
    """A rank its group waits for, busy and moving (`moving`: `slow_culprits`): a note, not a
    failure."""
    who = ranks_text(found.ranks) if found.ranks else found.culprit
    how = "; ".join(sorted(set(moving.values())))
    busy = places.get((found.group, found.ranks[0]), "") if found.ranks else ""
    waited = _longest_wait(data)
    text = (
        f"{who} {'is' if len(found.ranks) <= 1 else 'are'} slow, not stuck: busy in "
        f"{busy or found.where or 'its own code'}"
        + (f" while its group has waited {waited:.0f} s" if waited else "")
        + f" ({how} between two looks; past {SLOW_LIMIT_S:.0f} s it is called stuck)"
    )
    return replace(found, kind=DiagnosisKind.SLOW, why=how, sentence=text, level=Severity.WARN)


# ----------------------------------------------------------------- exceptions and deaths
def own_errors(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The task errors that are a rank's own (not a peer's failure seen from here), oldest
    first; each payload with the event's `time` and `probe_id`."""
    out = []
    for e in events:
        if e.get("kind") != TASK_ERROR:
            continue
        payload = {**(e.get("payload") or {})}
        payload.setdefault("time", e.get("time", 0.0))
        payload["probe_id"] = e.get("probe_id")
        if not is_consequence(payload):
            out.append(payload)
    return sorted(out, key=lambda p: float(p.get("time") or 0.0))


def is_consequence(error: Mapping[str, Any]) -> bool:
    """An error that reports another process's failure: Ray's error for a task that failed
    elsewhere (`echo`: the probe saw a RayTaskError passed on), or a collective whose peer
    left (raised inside torch.distributed)."""
    kind = str(error.get("exc_type") or "")
    if (
        error.get("echo")
        or error.get("in_collective")
        or kind.split("(", 1)[0].rsplit(".", 1)[-1] in CONSEQUENCE_TYPES
    ):
        return True
    message = str(error.get("message") or "")
    raised_in = _innermost_file(str(error.get("traceback") or ""))
    in_collective = "torch/distributed" in raised_in or "distributed_c10d" in raised_in
    return bool(PEER_GONE.search(message)) and (in_collective or "RuntimeError" in kind)


def _innermost_file(traceback: str) -> str:
    files = re.findall(r'File "([^"]+)"', traceback)
    return files[-1] if files else ""


def _root_failure(data: RunData, places: Mapping[tuple[str | None, int], str]) -> Diagnosis | None:
    """A rank's own exception or the first death, whichever came first; a hang whose culprits
    are all alive goes before deaths (they followed it)."""
    errors = own_errors(data.events)
    death = _first_death(data)
    if errors:
        error = errors[0]
        when = float(error.get("time") or 0.0)
        if death is None or death[1] >= when - EARLIER_SLACK_S:
            return _exception(error, data)
    if death is None:
        silent = _silent_culprit(data)
        return _death(silent, data) if silent is not None else None
    hang = hang_before_deaths(data, death[1] + EARLIER_SLACK_S)
    if hang is not None:
        return from_hang(hang, data, places)
    return _death(death[0], data)


def _exception(error: Mapping[str, Any], data: RunData) -> Diagnosis:
    rank = error.get("rank")
    who = f"rank {rank}" if rank is not None else _error_process(error, data)
    where = str(error.get("where") or "")
    why = f"{error.get('exc_type', 'Exception')}: {error.get('message', '')}".strip().rstrip(":")
    text = f"{who} raised {why}" + (f" ({where})" if where else "")
    after = _aftermath(data, error.get("group"), rank)
    return Diagnosis(
        DiagnosisKind.EXCEPTION,
        who,
        (rank,) if isinstance(rank, int) else (),
        where,
        why,
        text + (f"; {after}" if after else ""),
        group=error.get("group"),
        node=_node_of(data, str(error.get("probe_id"))),
        source="ranks",
    )


def _error_process(error: Mapping[str, Any], data: RunData) -> str:
    for p in data.processes:
        if p["info"]["probe_id"] == error.get("probe_id"):
            ctx = p["info"]["context"]
            return f"actor {ctx['actor_class']}" if ctx.get("actor_class") else process_label(ctx)
    return f"pid {error.get('pid', '?')}"


def _first_death(data: RunData) -> tuple[Mapping[str, Any], float] | None:
    """The dead process that died first, and when: ranked processes, and rank-less actors
    (a controller) when no rank died. Once a rank is dead, a silent one (`SILENT_S`) counts
    too: a lost node's ranks are proven dead only after the peers they took down."""
    dead: list[Mapping[str, Any]] = [p for p in data.processes if p.get("state") == "dead"]
    dead += _silent(data) if dead else []
    ranked = [p for p in dead if p["info"]["context"].get("rank") is not None]
    named = [p for p in dead if p["info"]["context"].get("actor_class")]
    chosen = ranked or named
    if not chosen:
        return None

    def when(p: Mapping[str, Any]) -> float:  # its last heartbeat, or Ray's time if earlier
        pid = p["info"]["probe_id"]
        known = [float(t) for t in (data.died_at.get(pid), p.get("last_seen")) if t]
        return min(known, default=0.0)

    def killed(p: Mapping[str, Any]) -> bool:  # ended by a controller: it followed another
        return KILLED_BY_CONTROLLER in data.deaths.get(p["info"]["probe_id"], "")

    first = min(chosen, key=lambda p: (killed(p), when(p), p["info"]["context"].get("rank") or 0))
    return first, when(first)


def _silent(data: RunData) -> list[Mapping[str, Any]]:
    """The ranked processes not dead and unheard for `SILENT_S` before the newest heartbeat."""
    newest = max((float(p.get("last_seen") or 0.0) for p in data.processes), default=0.0)
    return [
        p
        for p in data.processes
        if p.get("state") != "dead"
        and p["info"]["context"].get("rank") is not None
        and newest - float(p.get("last_seen") or 0.0) > SILENT_S
    ]


def _silent_culprit(data: RunData) -> Mapping[str, Any] | None:
    """A silent rank the hang analysis names (its peers' collectives failed with it, or wait
    for it): gone before the hub could prove it."""
    named = {
        (hang_group(report, f, data), r)
        for report in data.hang
        for f in report.get("findings", ())
        for r in f.get("ranks") or ()
    }
    silent = [
        p
        for p in _silent(data)
        if (p["info"]["context"].get("group"), p["info"]["context"]["rank"]) in named
        or (None, p["info"]["context"]["rank"]) in named
    ]
    return min(silent, key=lambda p: float(p.get("last_seen") or 0.0), default=None)


def _cause(process: Mapping[str, Any], data: RunData) -> str:
    if process.get("state") != "dead":
        newest = max(float(p.get("last_seen") or 0.0) for p in data.processes)
        quiet = newest - float(process.get("last_seen") or 0.0)
        return (
            f"no heartbeat for {quiet:.0f} s while its peers report (its process or its node "
            "is gone, or it is stopped)"
        )
    return data.deaths.get(process["info"]["probe_id"], "") or "no cause known"


def _death(process: Mapping[str, Any], data: RunData) -> Diagnosis:
    ctx = process["info"]["context"]
    cause = _cause(process, data)
    rank = ctx.get("rank")
    label = (
        process_label(ctx)
        if rank is not None or not ctx.get("actor_class")
        else (f"actor {ctx['actor_class']}")
    )
    node = ctx.get("node_ip") or ctx.get("hostname")
    kind = DiagnosisKind.OOM if _OOM.search(cause) else DiagnosisKind.DEATH
    culprit, ranks = label, ((rank,) if rank is not None else ())
    if cause.startswith("node gone"):
        culprit = f"node {node}"
        ranks = tuple(  # the ranks that node took with it (node ids: nodes may share an IP)
            sorted(
                p["info"]["context"]["rank"]
                for p in data.processes
                if p.get("state") == "dead"
                and p["info"]["context"].get("rank") is not None
                and data.deaths.get(p["info"]["probe_id"], "").startswith("node gone")
                and _node_key(p["info"]["context"]) == _node_key(ctx)
            )
        )
    others = sorted(
        p["info"]["context"]["rank"]
        for p in data.processes
        if p.get("state") == "dead"
        and p["info"]["context"].get("rank") is not None
        and p["info"]["context"].get("group") == ctx.get("group")
        and p["info"]["context"]["rank"] not in ranks
    )
    first = "died" if process.get("state") == "dead" else "went silent"
    first = f"{first} first" if others else ("is dead" if first == "died" else first)
    text = f"{culprit} {first}: {cause}"
    if others:
        text += f"; then {ranks_text(others)} died"
    after = _aftermath(data, ctx.get("group"), rank, skip=set(others))
    return Diagnosis(
        kind,
        culprit,
        ranks,
        f"pid {ctx.get('pid')} on {node}",
        cause,
        text + (f"; {after}" if after else ""),
        group=ctx.get("group"),
        node=node,
        source="ranks",
    )


def _node_key(ctx: Mapping[str, Any]) -> str:
    return str(ctx.get("node_id") or ctx.get("node_ip") or ctx.get("hostname") or "")


def _aftermath(
    data: RunData, group: str | None, culprit: object, skip: set[int] | None = None
) -> str:
    """What the culprit's group did next, in a few words: who waits, who died."""
    skip = skip or set()
    waiting = sorted(
        {
            r
            for report in data.hang
            for g in report.get("groups", ())
            if group is None or g.get("group") == group or report.get("group") == group
            for r in g.get("waiting") or ()
            if r != culprit and r not in skip
        }
    )
    if waiting:
        return f"{ranks_text(waiting)} wait for it in a collective"
    dead = sorted(
        p["info"]["context"]["rank"]
        for p in data.processes
        if p.get("state") == "dead"
        and p["info"]["context"].get("rank") not in (None, culprit)
        and p["info"]["context"].get("group") == group
        and p["info"]["context"]["rank"] not in skip
    )
    return f"then {ranks_text(dead)} died" if dead else ""


# ----------------------------------------------------------------- from the sections


def _node_of(data: RunData, probe_id: str) -> str | None:
    for p in data.processes:
        if p["info"]["probe_id"] == probe_id:
            ctx = p["info"]["context"]
            return ctx.get("node_ip") or ctx.get("hostname")
    return None
