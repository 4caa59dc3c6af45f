"""Hang diagnosis: align every rank's collectives by (group, sequence number) and say what is wrong.

Pure: per-rank records in, findings out. The findings name the culprit rank, the sequence
number, the op and its tensors, and where the culprit is, e.g. "group 0 (4 ranks): ranks 0-2 wait
in all_reduce #1043 (float32[1048576]) for 12.4 s; rank 3 never entered #1043, its last completed
collective is #1042; rank 3 is in load_batch data.py:41".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from rankscope.hang.model import (
    CallState,
    CollectiveRecord,
    Death,
    DeathKind,
    FindingKind,
    GroupState,
    HangFinding,
    HangReport,
)
from rankscope.ranks import format_ranks

STARTED = CallState.STARTED
FAILED = CallState.FAILED
DEFAULT_MIN_WAIT_S = 5.0
"""A collective running for less than this is not (yet) called a hang."""


@dataclass(frozen=True)
class RankEvidence:
    """What is known about one rank: its collectives, where it is, whether it lives."""

    rank: int
    records: tuple[CollectiveRecord, ...]
    groups: dict[str, tuple[int, ...]]
    where: str | None = None
    """Headline of its main thread's stack, e.g. `load_batch data.py:41`."""
    dead: bool = False
    death: str = ""
    """Why it died, as far as Ray and the node know."""
    last_seen: float = 0.0
    death_kind: DeathKind = DeathKind.UNKNOWN
    died_at: float | None = None
    """When Ray saw it end; None when unknown (then `last_seen` orders the deaths)."""
    paused: bool = False
    """Its level was switched live to `off`: its records stop where it was switched."""


def analyze_hang(
    job_id: str,
    evidence: Sequence[RankEvidence],
    now: float,
    min_wait_s: float = DEFAULT_MIN_WAIT_S,
) -> HangReport:
    """Findings over every group seen by any rank; keeps going when ranks are missing."""
    by_rank = {e.rank: e for e in evidence}
    groups: dict[str, tuple[int, ...]] = {}
    for e in evidence:
        for name, ranks in e.groups.items():  # () when only torch's flight recorder saw it
            if ranks or name not in groups:
                groups[name] = ranks
    findings: list[HangFinding] = []
    states: list[GroupState] = []
    waits: dict[str, dict[int, CollectiveRecord]] = {}
    failed_groups: set[str] = set()
    for name in sorted(groups, key=_group_order):
        members = groups[name] or _seen_in(name, by_rank)
        per_rank = {
            r: [rec for rec in by_rank[r].records if rec.group == name and not rec.p2p]
            for r in members
            if r in by_rank
        }
        findings.extend(_mismatches(name, per_rank))
        inside = {  # a dead rank's unfinished call is not a wait
            r: recs[-1]
            for r, recs in per_rank.items()
            if recs[-1:] and recs[-1].state is STARTED and not by_rank[r].dead
        }
        waiting = {r: rec for r, rec in inside.items() if now - rec.start >= min_wait_s}
        waits[name] = inside if waiting else {}
        failure = _failure(name, members, per_rank, inside, by_rank, now)
        if failure is not None:
            findings.append(failure)
            failed_groups.add(name)
        last = max((rec.seq for recs in per_rank.values() for rec in recs), default=0)
        states.append(GroupState(name, members, last, tuple(sorted(waiting))))
    findings.extend(
        _hangs(groups, {g: w for g, w in waits.items() if g not in failed_groups}, by_rank, now)
    )
    findings.extend(_dead(evidence, now))
    findings.extend(_first_death(evidence))
    missing = sorted({r for m in groups.values() for r in m} - set(by_rank))
    paused = tuple(sorted(e.rank for e in evidence if e.paused and not e.dead))
    return HangReport(
        job_id, now, tuple(findings), tuple(states), tuple(missing), paused_ranks=paused
    )


def _hangs(
    groups: dict[str, tuple[int, ...]],
    waits: dict[str, dict[int, CollectiveRecord]],
    by_rank: dict[int, RankEvidence],
    now: float,
) -> list[HangFinding]:
    findings = []
    stuck_elsewhere: list[str] = []
    for name, waiting in waits.items():  # `waiting`: every rank inside a collective, when
        if not waiting:  # at least one of them has waited min_wait_s
            continue
        members = groups[name] or _seen_in(name, by_rank)
        top = max(rec.seq for rec in waiting.values())
        at_top = sorted(r for r, rec in waiting.items() if rec.seq == top)
        rec = waiting[at_top[0]]
        inside_top = set(at_top)  # a list's `in`: 4,096 x 4,096 steps at 4,096 ranks
        absent = [r for r in members if r not in inside_top]
        if not absent:
            continue  # everyone is in it: slow, not stuck (the watchdog covers that)
        waited = now - min(waiting[r].start for r in at_top)
        seen_by = f" (seen by the {rec.source})" if rec.source else ""
        parts = [
            f"group {name} ({len(members)} ranks): {_ranks(at_top)} wait in {rec.op} "
            f"#{top} ({rec.tensors}) for {waited:.1f} s{seen_by}"
        ]
        for r in absent:
            parts.append(_absent_rank(r, name, top, by_rank, waits))
            other = _waiting_elsewhere(r, name, waits)
            if other is not None:
                stuck_elsewhere.append(
                    f"rank {r} waits in group {other[0]} {other[1].op} "
                    f"#{other[1].seq} while group {name} waits for it"
                )
        findings.append(HangFinding(FindingKind.HANG, "; ".join(parts), name, tuple(absent), top))
    if stuck_elsewhere:
        findings.append(
            HangFinding(
                FindingKind.CROSS_GROUP,
                "cross-group deadlock: "
                + "; ".join(stuck_elsewhere)
                + ": make every rank issue the groups' collectives in the same order",
            )
        )
    return findings


def _failure(
    name: str,
    members: tuple[int, ...],
    per_rank: dict[int, list[CollectiveRecord]],
    inside: dict[int, CollectiveRecord],
    by_rank: dict[int, RankEvidence],
    now: float,
) -> HangFinding | None:
    """Ranks whose last call in the group raised: say so with the backend's reason."""
    failed = {r: recs[-1] for r, recs in per_rank.items() if recs[-1:] and recs[-1].state is FAILED}
    if not failed:
        return None
    top = max(rec.seq for rec in failed.values())
    at_top = sorted(r for r, rec in failed.items() if rec.seq == top)
    rec = failed[at_top[0]]
    errors = Counter(failed[r].error for r in at_top if failed[r].error)
    reason = f": {errors.most_common(1)[0][0]}" if errors else ""
    parts = [
        f"group {name} ({len(members)} ranks): {_ranks(at_top)} failed in {rec.op} #{top} "
        f"({rec.tensors}){reason}"
    ]
    still = sorted(r for r, call in inside.items() if call.seq == top)
    if still:
        waited = now - min(inside[r].start for r in still)
        parts.append(f"{_ranks(still)} still wait in #{top} for {waited:.1f} s")
    accounted = {*at_top, *still}
    others = [r for r in members if r not in accounted]
    parts.extend(_absent_rank(r, name, top, by_rank, {}) for r in others)
    culprits = tuple(r for r in others if not _entered(per_rank.get(r, []), top))
    return HangFinding(FindingKind.FAILED, "; ".join(parts), name, culprits, top)


def _seen_in(group: str, by_rank: dict[int, RankEvidence]) -> tuple[int, ...]:
    """A group whose members no rank could name: the ranks that have called into it."""
    return tuple(sorted(r for r, e in by_rank.items() if any(c.group == group for c in e.records)))


def _entered(records: list[CollectiveRecord], seq: int) -> bool:
    return any(rec.seq >= seq for rec in records)


def _absent_rank(
    rank: int,
    group: str,
    seq: int,
    by_rank: dict[int, RankEvidence],
    waits: dict[str, dict[int, CollectiveRecord]],
) -> str:
    evidence = by_rank.get(rank)
    if evidence is None:
        return f"rank {rank} sent no evidence (no probe, or it did not answer)"
    own = [r for r in evidence.records if r.group == group and not r.p2p]
    completed = [r.seq for r in own if r.state is CallState.COMPLETED]
    behind = [r for r in own if r.seq < seq and r.state is CallState.STARTED]
    failed = [r for r in own if r.seq == seq and r.state is FAILED]
    if failed:
        error = f": {failed[-1].error}" if failed[-1].error else ""
        text = f"rank {rank} failed in #{seq}{error}"
    elif any(r.seq == seq and r.state is CallState.COMPLETED for r in own):
        text = f"rank {rank} completed #{seq}"
    elif any(r.seq == seq for r in own):
        return (
            f"rank {rank} was in #{seq} when it died"
            if evidence.dead
            else f"rank {rank} is in #{seq}"
        )
    elif behind:
        text = f"rank {rank} is still in #{behind[-1].seq} ({behind[-1].op})"
    else:
        last = f"#{max(completed)}" if completed else "none"
        text = f"rank {rank} never entered #{seq}, its last completed collective is {last}"
    if evidence.dead:
        return f"{text}; rank {rank} is dead"
    if evidence.paused:
        text += " (its level is off: it records no collectives)"
    if evidence.where:
        text += f"; rank {rank} is in {evidence.where}"
    return text


def _waiting_elsewhere(
    rank: int, group: str, waits: dict[str, dict[int, CollectiveRecord]]
) -> tuple[str, CollectiveRecord] | None:
    for other, waiting in waits.items():
        if other != group and rank in waiting:
            return other, waiting[rank]
    return None


_COMPARED: tuple[tuple[str, Callable[[CollectiveRecord], Hashable], Callable[..., str]], ...] = (
    ("called", attrgetter("op"), lambda c: c.op),
    ("passed", attrgetter("shapes", "dtypes"), lambda c: c.tensors),
)
"""What must match across ranks at one sequence number: the op, then the tensors (compared as
shapes and dtypes, written out only for the message: at 4,096 ranks writing every record's
tensors out would be a third of the analysis)."""


_SOURCE = attrgetter("source")


def _mismatches(name: str, per_rank: dict[int, list[CollectiveRecord]]) -> list[HangFinding]:
    """The first sequence number at which the ranks' calls differ (later ones follow from it)."""
    by_seq: dict[int, dict[int, CollectiveRecord]] = {}
    for rank, records in per_rank.items():
        for rec in records:
            by_seq.setdefault(rec.seq, {})[rank] = rec
    for seq in sorted(by_seq):
        calls = by_seq[seq]
        if len(calls) < 2 or len(set(map(_SOURCE, calls.values()))) > 1:
            continue  # two recorders name the same op differently (all_gather_into_tensor)
        for what, key, text in _COMPARED:
            if len(set(map(key, calls.values()))) < 2:
                continue  # all agree: the common case, and the cheap one
            values = {r: key(c) for r, c in calls.items()}
            counts = Counter(values.values())
            majority = counts.most_common(1)[0][0]
            odd = sorted(r for r, v in values.items() if v != majority)
            rest = sorted(r for r, v in values.items() if v == majority)
            odd_text = "; ".join(f"rank {r} {what} {text(calls[r])}" for r in odd)
            message = (
                f"group {name} #{seq}: {odd_text} where {_ranks(rest)} {what} "
                f"{text(calls[rest[0]])} (at {calls[odd[0]].caller})"
            )
            return [HangFinding(FindingKind.MISMATCH, message, name, tuple(odd), seq)]
    return []


def _dead(evidence: Sequence[RankEvidence], now: float) -> list[HangFinding]:
    findings = []
    for e in evidence:
        if not e.dead:
            continue
        last = e.records[-1] if e.records else None
        text = f"rank {e.rank} is dead (last heard {now - e.last_seen:.1f} s ago)"
        if e.death:
            text += f": {e.death}"
        if last is not None:
            text += (
                f"; its last collective: {last.op} #{last.seq} in group {last.group} "
                f"({last.state.value})"
            )
        if e.where:
            text += f"; it was last in {e.where}"
        findings.append(HangFinding(FindingKind.DEAD, text, None, (e.rank,)))
    return findings


_FOLLOWED = {
    DeathKind.KILLED: "were killed with ray.kill (a controller or the driver ends the group "
    "when one worker fails)",
    DeathKind.OWNER_DIED: "were ended by Ray when their owner (the driver or the actor that "
    "created them) died",
}


def _first_death(evidence: Sequence[RankEvidence]) -> list[HangFinding]:
    dead = {
        e.rank: (Death(e.death_kind, e.death, e.died_at), e.last_seen) for e in evidence if e.dead
    }
    found = first_death(dead)
    if found is None:
        return []
    rank, text = found
    return [HangFinding(FindingKind.FIRST_DEATH, text, None, (rank,))]


def first_death(dead: Mapping[int, tuple[Death, float]]) -> tuple[int, str] | None:
    """Of several dead ranks (rank -> its death and when it was last heard), the one that died
    first and how the others followed; None for fewer than two.

    The others usually died of the first: a controller or the driver tears the group down.
    """
    if len(dead) < 2:
        return None
    order = sorted(dead, key=lambda r: (_when(*dead[r]), r))
    first, rest = order[0], order[1:]
    death = dead[first][0]
    kinds = {dead[r][0].kind for r in rest}
    how = _FOLLOWED.get(next(iter(kinds)), "died") if len(kinds) == 1 else "died"
    text = f"rank {first} died first" + (f": {death.cause}" if death.cause else "")
    times = [dead[r][0].died_at for r in order]
    known = [t for t in times if t is not None]
    if len(known) == len(times):
        text += f"; {_ranks(rest)} {how} within {max(known) - min(known):.1f} s after it"
    else:
        text += f"; then {_ranks(rest)} {how}"
    return first, text


def _when(death: Death, last_seen: float) -> float:
    return death.died_at if death.died_at is not None else last_seen


def _ranks(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"


def _group_order(name: str) -> tuple[int, str]:
    return (0, f"{int(name):08d}") if name.isdigit() else (1, name)
