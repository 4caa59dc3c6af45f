"""Where is every rank right now: stacks of every thread of every registered process."""

from rankscope.stacks.model import Frame, ProcessStacks, ThreadStack
from rankscope.stacks.worker import capture_threads

__all__ = ["Frame", "ProcessStacks", "ThreadStack", "capture_threads"]
