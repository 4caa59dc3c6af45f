"""The incident catalog of `benchmarks/bench_incidents.py` (issue 30): real jobs on the three
clients, each with one injected incident and its expected answer, and healthy scenarios."""
