"""What the monitor keeps per rank, sends across processes, and finds."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from rankscope.hang.model import CollectiveRecord
from rankscope.monitor.phases import PhaseTime
from rankscope.monitor.straggler import StragglerScore


class FindingKind(str, enum.Enum):
    STRAGGLER = "straggler"
    """A rank computes longer than the other ranks of its group (or than its own best)."""
    THROUGHPUT_DRIFT = "throughput_drift"
    """Tokens/s (or steps/s) moved by more than the threshold within the window."""
    LOSS_SPIKE = "loss_spike"
    """The loss jumped far above its recent median (robust z-score over median/MAD)."""
    LOSS_OSCILLATION = "loss_oscillation"
    """The smoothed loss swings up and down, by more than a share of the loss, again and again."""
    LOSS_DIVERGENCE = "loss_divergence"
    """The loss trends up: its recent level is well above its best."""
    LOSS_DISAGREEMENT = "loss_disagreement"
    """One rank's loss level differs from the other ranks of its group (replicas should agree)."""
    NON_FINITE = "non_finite"
    """NaN or Inf in the loss, the grad norm, a gradient or an activation: the first one."""
    DEVICE_MEMORY = "device_memory"
    """Device memory used over the threshold share of the device."""
    HOST_MEMORY = "host_memory"
    """The node's memory used over the threshold share."""
    COLLECTIVE_LATENCY = "collective_latency"
    """A group's collectives take long after the last rank arrives, or ranks arrive far apart."""


@dataclass(frozen=True)
class Finding:
    """One verdict: what, which ranks, since which step, the evidence, and what to do."""

    kind: FindingKind
    ranks: tuple[int, ...]
    step: int | None
    evidence: str
    advice: str
    group: str = ""
    value: float = 0.0
    """The number that crossed its threshold (a ratio, a z-score, a share, seconds)."""


@dataclass(frozen=True)
class Thresholds:
    """When a number becomes a finding. Example: `Thresholds(throughput_drift=0.2)`."""

    straggler: float = 1.2
    """Compute against the group median (or the rank's own best) at or over this."""
    throughput_drift: float = 0.15
    """Tokens/s (or steps/s) level moving by more than this share."""
    loss_z: float = 6.0
    """Robust z-score (median/MAD of the previous `loss_window` steps) over this is a spike."""
    loss_window: int = 50
    oscillation_amplitude: float = 0.1
    """A swing of the smoothed loss larger than this share of the loss counts."""
    oscillation_swings: int = 4
    """This many counted swings within the window is an oscillation."""
    divergence_rise: float = 0.5
    """Recent loss level this share above its best level, and rising, is a divergence."""
    loss_disagreement: float = 0.25
    """A rank's loss level off the group median by more than this share."""
    device_memory: float = 0.85
    host_memory: float = 0.90
    collective_latency_s: float = 0.05
    """The floor of a late arrival (first to last arrival) or a slow collective (last arrival
    to completion): never a single sample, always over a window (`monitor.collectives`)."""
    late_step_share: float = 0.1
    """...and over this share of the group's median step time, so a job of long steps is
    allowed the arrival skew its data loading brings."""

    def __post_init__(self) -> None:
        for name in ("throughput_drift", "oscillation_amplitude", "divergence_rise"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} ({value}) must be over 0")
        for name in ("device_memory", "host_memory"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} ({value}) must be a share of the total in (0, 1]")
        if self.straggler <= 1:
            raise ValueError(f"straggler ({self.straggler}) must be over 1.0")
        if self.loss_window < 5:
            raise ValueError(f"loss_window ({self.loss_window}) must be at least 5 steps")
        if not 0 <= self.late_step_share < 1:
            raise ValueError(f"late_step_share ({self.late_step_share}) must be in [0, 1)")
        if self.loss_z <= 0 or self.collective_latency_s <= 0 or self.oscillation_swings < 2:
            raise ValueError(
                f"loss_z ({self.loss_z}) and collective_latency_s "
                f"({self.collective_latency_s}) must be over 0, oscillation_swings "
                f"({self.oscillation_swings}) at least 2"
            )


@dataclass(slots=True)
class StepSample:
    """One `rankscope.step()`: its number, its `time.time()`, and the numbers it was given.

    Slotted and not frozen: a 4,096-rank report reads half a million of them, and a frozen
    dataclass's `__init__` costs four times as much. Treat as read-only.
    """

    step: int
    t: float
    loss: float | None = None
    tokens: float | None = None
    grad_norm: float | None = None


@dataclass(frozen=True)
class NonFinite:
    """The first NaN/Inf a rank saw."""

    step: int
    t: float
    name: str
    """`loss`, `grad_norm`, a metric's name, or `gradient`/`activation` (from `watch_nan`)."""
    value: str
    """`nan`, `inf` or `-inf`."""
    module: str = ""
    """The module that produced it (with `watch_nan`)."""
    tensor: str = ""
    """The parameter or output it was in (with `watch_nan`)."""

    @property
    def where(self) -> str:
        place = f" in {self.module}" if self.module else ""
        place += f" ({self.tensor})" if self.tensor else ""
        return f"{self.value} {self.name}{place} at step {self.step}"


@dataclass(frozen=True)
class MemoryUse:
    """Device and node memory of one rank when it last reported (bytes; 0 when unknown)."""

    device_used: int = 0
    device_total: int = 0
    host_used: int = 0
    host_total: int = 0

    @property
    def device_share(self) -> float:
        return self.device_used / self.device_total if self.device_total else 0.0

    @property
    def host_share(self) -> float:
        return self.host_used / self.host_total if self.host_total else 0.0


@dataclass(frozen=True)
class RankSeries:
    """One rank's whole monitor state: what the `monitor` probe command answers."""

    rank: int
    group: str
    """The rank's group (its rendezvous, or `rankscope.init(group=...)`); ranks compare in it."""
    node: str
    role: str
    samples: tuple[StepSample, ...]
    first_nonfinite: NonFinite | None = None
    memory: MemoryUse = field(default_factory=MemoryUse)
    collectives: tuple[CollectiveRecord, ...] = ()
    """The hang recorder's records of this rank (the waits and arrival order)."""
    dropped: int = 0
    """Steps pushed out of the bounded series."""
    phases: tuple[PhaseTime, ...] = ()
    """Seconds per step in each phase, from the tracing spans (empty when none were seen)."""


@dataclass(frozen=True)
class MonitorSummary:
    """What every heartbeat carries (a few hundred bytes): the hub's live view of a rank."""

    step: int
    step_s: float
    """Median wall time of the recent steps."""
    tokens_per_s: float
    loss: float | None
    grad_norm: float | None
    wait_s: float
    """Median collective wait of the recent steps (0 without the recorder)."""
    memory: MemoryUse
    first_nonfinite: NonFinite | None = None
    alerts: tuple[str, ...] = ()
    """This rank's own findings, one line each (the cross-rank ones need `rankscope monitor`)."""
    loss_level: float | None = None
    """Median finite loss of the recent steps (what the loss-disagreement alert compares)."""
    steps_over: int = 10
    """How many step times `step_s` and `wait_s` are medians of: a rank that has made only a
    step or two is not yet compared with its group (one sample is not a finding)."""

    @property
    def compute_s(self) -> float:
        return max(0.0, self.step_s - self.wait_s)


def nonfinite_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


@dataclass(frozen=True)
class RankRow:
    """One row of `rankscope top`."""

    rank: int
    group: str
    node: str
    role: str
    pid: int
    state: str
    step: int
    step_s: float
    tokens_per_s: float
    wait_s: float
    straggler: float
    """Compute against the group's median rank (1.0 typical)."""
    last_arrival_share: float
    loss: float | None
    grad_norm: float | None
    device_used: int
    device_total: int
    host_used: int
    host_total: int
    alerts: tuple[str, ...]
    cause: bool = False
    """The group's first rank to go non-finite, or a straggler: a cause the others' alerts
    (their own NaNs after an all_reduce, their waits) follow from."""

    @property
    def badness(self) -> tuple[int, int, int, float, float]:
        return (
            int(self.state != "alive"),
            int(self.cause),
            len(self.alerts),
            self.straggler,
            self.last_arrival_share,
        )


@dataclass(frozen=True)
class JobTop:
    """One job's live rows (`rankscope top`), the worst rank first."""

    job_id: str
    ranks: tuple[RankRow, ...]


@dataclass(frozen=True)
class JobHealth:
    """One job's findings over every rank's whole series (`rankscope monitor`)."""

    job_id: str
    findings: tuple[Finding, ...]
    ranks: int
    """Ranks whose series were analysed."""
    steps: int
    """The longest series analysed."""
    missing: tuple[str, ...]
    """Processes that did not answer, and why."""
    stragglers: dict[str, tuple[StragglerScore, ...]]
    """Per group, every rank's straggler score, the worst first."""
