"""`rankscope doctor`: every alive node checked before (or during) a job."""

from rankscope.doctor.preflight.collect import PreflightOptions, preflight
from rankscope.doctor.preflight.model import Check, ClusterFacts, NodeFacts, PreflightReport, Status

__all__ = [
    "Check",
    "ClusterFacts",
    "NodeFacts",
    "PreflightOptions",
    "PreflightReport",
    "Status",
    "preflight",
]
