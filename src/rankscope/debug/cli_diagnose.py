"""`rankscope diagnose --check-debug-ports`: the check `doctor/cli.py` dispatches."""

from __future__ import annotations

from rich.console import Console

from rankscope.debug.analysis import FINDINGS

__all__ = ["check_debug_ports"]


def check_debug_ports(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    """One line per debug session: reachable, tunnel-only, not listening, or process died."""
    from rankscope.cli.output import to_json
    from rankscope.debug.collect_ports import port_checks
    from rankscope.debug.render import render_port_checks
    from rankscope.runtime.ask import Selection

    checks = port_checks(address, Selection(job))
    if as_json:
        console.print_json(to_json("diagnose-debug-ports", checks))
    else:
        console.print(render_port_checks(checks))
    return 1 if any(c.verdict in FINDINGS for c in checks) else 0
