"""`make bench`: run every benchmarks/bench_*.py in turn; each prints its own medians and ratios.

bench_incidents.py is left out: it runs for about 40 minutes, as `make bench-incidents`."""

from __future__ import annotations

import pathlib
import subprocess
import sys

SEPARATE = {"bench_incidents.py"}
"""Benchmarks with a make target of their own."""


def main() -> int:
    failed = []
    for script in sorted(pathlib.Path(__file__).parent.glob("bench_*.py")):
        if script.name in SEPARATE:
            continue
        print(f"\n=== {script.name} ===", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
