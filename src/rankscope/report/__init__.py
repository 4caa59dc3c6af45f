"""One self-contained HTML report for a whole job, from its run directory and a live snapshot."""

from rankscope.report.model import RunData, RunReport, Section

__all__ = ["RunData", "RunReport", "Section"]
