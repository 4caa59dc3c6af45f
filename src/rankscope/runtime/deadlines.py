"""How long the CLI waits for the ranks to answer each command, and why that long.

Every command that asks the ranks names its deadline here, so the waits can be read, compared
and changed in one place. A rank that misses its deadline is reported as not answering (and,
for stacks and hang, py-spied instead); the command itself never waits longer than its
deadline plus the hub's round trip.
"""

from __future__ import annotations

__all__ = [
    "DEBUG_SESSIONS_S",
    "ENVIRONMENT_S",
    "EXCHANGE_S",
    "GPUS_S",
    "HANG_S",
    "HUB_DEFAULT",
    "MEMORY_S",
    "SAMPLES_S",
    "SERIES_S",
    "STACKS_S",
    "TRACE_S",
]

STACKS_S = 2.0
"""`stacks` and `children`: the probe reads its own threads' frames from its own thread in
milliseconds, even while the main thread waits in a collective; a rank silent for 2 s is
py-spied instead, and a user paged at night should not wait longer."""

HANG_S = 2.0
"""`collectives`, `where` and `children` for `hang`: as light as `stacks` (a window of the
recorder's ring past 256 ranks), with the same py-spy fallback for the silent."""

MEMORY_S = 3.0
"""`memory`: runs on the probe's handler thread within its 2 s budget
(RANKSCOPE_HANDLER_BUDGET), so a slow rank answers "took longer" before this deadline."""

SERIES_S = 5.0
"""`monitor`: each rank's whole step series, the largest routine answer (600 samples and
their phases); the report reads it with the same deadline."""

SAMPLES_S = 4.5
"""`samples`: the probe samples its active thread for 1.5 s at most (`stacks.worker`,
off its handler thread), then answers; 3 s more for the round trip on a busy node."""

ENVIRONMENT_S = 5.0
"""`environment`: the probe runs `nvidia-smi` (3 s at most) to read the driver."""

GPUS_S = 5.0
"""`gpus`: the probe asks NVML or `nvidia-smi` (3 s at most) which GPUs it holds."""

TRACE_S = 3.0
"""`trace` start, drain and stop: a drain returns the spans and collectives since the last
one (bounded rings), every 0.5 s while a window records."""

DEBUG_SESSIONS_S = 3.0
"""`debug_sessions`: a listing of the process's open sessions, read from memory."""

EXCHANGE_S = 60.0
"""`verify_distributed_tensors`' all-gather through the hub: the ranks reach the call a step
apart (a straggler, a rank still loading), so it waits for the slowest rank to arrive, not
for a probe to answer."""

HUB_DEFAULT = None
"""`level` and `alerts_ack`: the hub's own command deadline (`Config.command_deadline`,
RANKSCOPE_COMMAND_DEADLINE), as these small writes always had."""
