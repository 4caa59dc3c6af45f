"""Per-rank logs: `DistributedLogger`, `capture_logging`, and `rankscope logs` reading them."""

from rankscope.logs.api import DistributedLogger, capture_logging
from rankscope.logs.model import FoldedLine, LogLine, TemplateStat
from rankscope.logs.worker import RankFileHandler

__all__ = [
    "DistributedLogger",
    "FoldedLine",
    "LogLine",
    "RankFileHandler",
    "TemplateStat",
    "capture_logging",
]
