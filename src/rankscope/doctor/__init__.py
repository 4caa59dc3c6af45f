"""Environment facts of every rank, compared by `rankscope diagnose`."""

from rankscope.doctor.model import EnvironmentFacts, EnvironmentFinding, ProcessFacts
from rankscope.doctor.worker import collect_facts

__all__ = ["EnvironmentFacts", "EnvironmentFinding", "ProcessFacts", "collect_facts"]
