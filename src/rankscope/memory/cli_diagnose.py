"""`rankscope diagnose --mode memory_profile`: every rank's memory and verdicts, as JSON + HTML.

Both files go into the hub's run directory, under the job id (`profile_files.py` writes them),
and their paths there are printed.
"""

from __future__ import annotations

from rich.console import Console

from rankscope.memory.render import render

__all__ = ["memory_profile"]


def memory_profile(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    """Snapshot every rank, write the verdicts; exit code 1 when a rank has a finding."""
    from rankscope.cli.output import to_json
    from rankscope.memory.collect_profile import COMMAND, memory_profiles
    from rankscope.runtime.ask import Selection

    profiles = memory_profiles(address, Selection(job))
    if as_json:
        console.print_json(to_json(COMMAND, profiles))
    else:
        for p in profiles:
            console.print(render(p.memory))
            console.print(f"wrote {p.files.json_path}")
            console.print(f"wrote {p.files.html_path}")
    return 1 if any(p.memory.has_findings for p in profiles) else 0
