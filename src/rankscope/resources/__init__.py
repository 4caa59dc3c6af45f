"""Resources: why work is pending, and a placement plan with reasons (`SmartResourceAllocator`)."""

from rankscope.resources.api import SmartResourceAllocator
from rankscope.resources.model import (
    AllocationError,
    AllocationPlan,
    AllocationTimeout,
    BundlePlacement,
    Demand,
    NodeResources,
    PendingReport,
    PendingVerdict,
    PlanError,
    Verdict,
)

__all__ = [
    "AllocationError",
    "AllocationPlan",
    "AllocationTimeout",
    "BundlePlacement",
    "Demand",
    "NodeResources",
    "PendingReport",
    "PendingVerdict",
    "PlanError",
    "SmartResourceAllocator",
    "Verdict",
]
