"""Per-rank logs: `DistributedLogger`, `capture_logging`, and `rankscope logs` reading them."""

from rankscope.logs.handler import RankFileHandler, capture_logging
from rankscope.logs.logger import DistributedLogger
from rankscope.logs.model import FoldedLine, LogLine, TemplateStat

__all__ = [
    "DistributedLogger",
    "FoldedLine",
    "LogLine",
    "RankFileHandler",
    "TemplateStat",
    "capture_logging",
]
