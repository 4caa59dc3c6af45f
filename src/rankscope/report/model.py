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

    @property
    def ok(self) -> bool:
        return not self.findings


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

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.sections)
