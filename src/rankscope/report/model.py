"""What a job report holds: the run's data in, a verdict, a timeline and sections out."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(str, enum.Enum):
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class TimelineItem:
    """One event of the run on the report's time axis."""

    time: float
    kind: str
    text: str
    severity: Severity = Severity.INFO
    who: str = ""
    """The rank (or process) it came from, e.g. `rank 3`."""


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    omitted: str = ""
    """What was folded away to keep the page small (e.g. "4,090 alive ranks")."""


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    highlight: bool = False
    """Drawn in red and thick: a rank the text names (it diverges from the others)."""


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    """"bytes", "s" or "": how the y axis is written."""
    series: tuple[Series, ...]
    x_unit: str = "time"
    """"time" (epoch seconds, written as a clock) or "step" (step numbers)."""


class DiagnosisKind(str, enum.Enum):
    """What kind of trouble the verdict names: the structured companion of its sentence."""

    EXCEPTION = "exception"
    """A rank's task or training loop raised; its peers then wait or fail."""
    DEATH = "death"
    """A process (or its node) is gone: the first to die."""
    OOM = "oom"
    """Out of memory: the kernel or Ray killed a process, or CUDA raised."""
    HANG = "hang"
    """A rank is stuck outside the collective its group waits in."""
    SLOW = "slow"
    """A rank its group waits for is busy and making progress: slow, not stuck (a note)."""
    MISMATCH = "mismatch"
    """Ranks called different collectives (kind, count, shape or dtype) at one point."""
    COLLECTIVE_FAILED = "collective_failed"
    """Ranks failed in a collective (the backend raised) with no death or exception behind it."""
    CROSS_GROUP_DEADLOCK = "cross_group_deadlock"
    NAN = "nan"
    LOSS_SPIKE = "loss_spike"
    LOSS_DIVERGENCE = "loss_divergence"
    DIVERGENCE = "divergence"
    """Ranks that should hold the same values do not (consistency checks, loss levels)."""
    STRAGGLER = "straggler"
    THROUGHPUT_DRIFT = "throughput_drift"
    LEAK = "leak"
    MEMORY = "memory"
    """Memory use over its threshold share (device or host), not yet a leak or an OOM."""
    INFEASIBLE = "infeasible"
    WAITING = "waiting"
    """Work waits for resources that others hold."""
    BREAKPOINT = "breakpoint"
    ERROR_BURST = "error_burst"
    ENVIRONMENT = "environment"
    ALERT = "alert"
    """An alert of a rule of the user's own."""


@dataclass(frozen=True)
class Diagnosis:
    """The verdict as data: what, who, where and why (`report --json`'s `diagnosis`)."""

    kind: DiagnosisKind
    culprit: str
    """Who to look at: `rank 3`, `ranks 2,3`, `pid 123@host`, `actor TaskRunner`, `node IP`."""
    ranks: tuple[int, ...]
    where: str
    """The user's `file.py:LINE`, or the resource (`CPU`), or the process."""
    why: str
    sentence: str
    """The verdict's sentence, as the page shows it."""
    group: str | None = None
    node: str | None = None
    level: Severity = Severity.FAIL
    """FAIL for a finding; WARN for a note (slow, not stuck) that does not fail the page."""
    source: str = ""
    """The section whose data said it (`hang`, `stacks`, `ranks`, ...)."""


@dataclass(frozen=True)
class Section:
    """One feature's part of the report; present only when the run has data for it."""

    key: str
    title: str
    findings: tuple[str, ...] = ()
    """Sentences that say what went wrong (none: the section is healthy)."""
    summary: str = ""
    tables: tuple[Table, ...] = ()
    charts: tuple[Chart, ...] = ()
    notes: tuple[str, ...] = ()
    level: Severity = Severity.INFO
    """Without findings: INFO is healthy; WARN says something to know that is no failure (a
    rank slow, not stuck; data older than the verdict's finding)."""

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def healthy(self) -> bool:
        """No finding and nothing to note: the page draws a check mark."""
        return self.ok and self.level is Severity.INFO


@dataclass(frozen=True)
class RunData:
    """Everything collected about one job: the run directory's files and, when the job is
    live, a fresh snapshot through the hub. Plain JSON-like values: the report is pure."""

    job_id: str
    source: str
    """Where the data came from: the run directory's path, or "the hub" when it is remote."""
    events: tuple[dict[str, Any], ...] = ()
    artifacts: dict[str, Any] = field(default_factory=dict)
    """Parsed JSON artifacts of the run directory by file name, oldest first (hang and memory
    reports)."""
    files: tuple[tuple[str, int], ...] = ()
    """Every file of the job's run directory with its size (traces included)."""
    processes: tuple[dict[str, Any], ...] = ()
    """The live registry (`status --json`'s processes), empty when the job is not live."""
    deaths: dict[str, str] = field(default_factory=dict)
    first_death: str = ""
    died_at: dict[str, float] = field(default_factory=dict)
    """When Ray saw each dead process end (by probe id), where it knows."""
    moving: dict[str, str] = field(default_factory=dict)
    """Live processes that moved while the report looked (by probe id): what moved (its step,
    its call stack, its disk I/O). A rank its group waits for that moves is slow, not stuck."""
    odd_places: tuple[dict[str, Any], ...] = ()
    """Where live stragglers spend time their peers do not (`collect_straggler_places`): {"group",
    "rank", "place", "share", "peers_share", "seconds"}."""
    hang: tuple[dict[str, Any], ...] = ()
    """Live hang reports (`hang --json`'s data)."""
    stacks: tuple[dict[str, Any], ...] = ()
    """Live stack reports (`stacks --json`'s data)."""
    health: tuple[dict[str, Any], ...] = ()
    """Live training health (`monitor --json`'s data): findings over every rank's series."""
    top: tuple[dict[str, Any], ...] = ()
    """Live per-rank rows (`top --json`'s data), the worst rank first."""
    series: tuple[dict[str, Any], ...] = ()
    """Step series per rank: {"rank", "group", "samples": [[step, time, loss, tokens,
    grad_norm]]}: the monitor's live series, or the whole run's from the run directory."""
    series_from: str = ""
    """Where `series` comes from: "" (live), or the run directory's `steps-*.json` files (every
    Nth step of the whole run)."""
    pending: tuple[dict[str, Any], ...] = ()
    """This job's work Ray has not placed, live (`why-pending --json`'s data narrowed to the
    job): {"verdicts": [...], "notes": [...]}."""
    traces: tuple[dict[str, Any], ...] = ()
    """The run's trace files read back: {"name", "bytes", and "digest" or "error"}."""
    environment: tuple[dict[str, Any], ...] = ()
    """Doctor results: {"source", "command": "doctor" | "diagnose", "data"}, from the run
    directory's saved `--json` outputs and, when the job is live, a fresh `diagnose`."""
    notes: tuple[str, ...] = ()
    """What could not be read, said once on the page."""


@dataclass(frozen=True)
class RunReport:
    job_id: str
    source: str
    generated_at: float
    verdict: str
    timeline: tuple[TimelineItem, ...]
    sections: tuple[Section, ...]
    notes: tuple[str, ...] = ()
    diagnosis: Diagnosis | None = None
    """The verdict's kind, culprit, where and why; None when there is no finding."""

    @property
    def ok(self) -> bool:
        failing = self.diagnosis is not None and self.diagnosis.level is Severity.FAIL
        return all(s.ok for s in self.sections) and not failing
