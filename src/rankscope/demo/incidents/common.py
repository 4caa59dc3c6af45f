"""What every incident shares: its record in the catalog, the marks a job leaves, gloo ranks.

An incident is a real job (a driver subprocess, `python -m rankscope.demo.incidents.driver NAME
ADDRESS DIR`) on one local cluster, with rankscope installed only by the setup hook. The job writes
into its own directory: `symptom` (the time its faulty rank begins to fail, written by that rank
as it does), and reads `stop` (the runner asks healthy jobs to end). The expected answer's
`where` is found in the source by a marker comment (`# incident: NAME`) on the faulty line, so
it stays right when the file is edited.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

WORLD = 4
"""Ranks of every job: small enough for two cores, big enough that one rank is odd."""
FAULT_RANK = 2
"""The rank that misbehaves, unless an incident says otherwise (not 0: rank 0 is special)."""
NODE_RESOURCE = "rs_incident_node"
"""The custom resource of the node the runner adds for the node-lost incident."""
RUN_FOR_S = 600.0
"""A job that nobody stops ends by itself after this (the runner always stops it first)."""


@dataclass(frozen=True)
class Expected:
    """The right answer: `kinds` (any of them is right), the culprit's ranks, `culprit` (a
    substring of the diagnosis' culprit, for one that is no rank: `actor Evaluator`), and `where`
    (a substring of the diagnosis' `where`: `file.py:LINE` or a resource such as `CPU`)."""

    kinds: tuple[str, ...]
    ranks: tuple[int, ...] = ()
    where: str = ""
    culprit: str = ""

    def describe(self) -> str:
        ranks = ",".join(map(str, self.ranks))
        who = f"rank {ranks}" if ranks else self.culprit
        parts = ["|".join(self.kinds), who, self.where]
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class Incident:
    """One entry of the catalog: a job with one injected fault (or none), and its answer."""

    name: str
    client: str
    """"actors", "verl" or "raytrain"."""
    description: str
    run: Callable[[str], None]
    """The job's driver body, given the job's directory; Ray is already initialised."""
    expected: Expected | None
    """None for a healthy scenario: no "fail" diagnosis and no alert may come."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra variables in the job's runtime_env."""
    node: bool = False
    """The job needs a second node (`NODE_RESOURCE`), which the runner (job.py) adds before the job
    and removes once the faulty rank writes `node_ready`: a node lost."""

    @property
    def healthy(self) -> bool:
        return self.expected is None


TRAIN_PY = os.path.join(os.path.dirname(__file__), "train.py")
"""The user's training code every client runs, whose `# incident:` lines are the answers."""


def fault_incident(
    client: str, who: str, fault: str, what: str, run: Callable[[str], None],
    kinds: tuple[str, ...], where: bool | str,
) -> Incident:  # fmt: skip
    """The catalog entry of one fault of train.py on one client: rank FAULT_RANK (`who`, as
    the client names it) does `what`; the answer is one of `kinds` at the fault's tagged line
    (`where=True`), at a resource (`where="rss"`: a leak's line needs an allocation tracer,
    which no job runs unasked), or anywhere (`where=False`)."""
    at = where if isinstance(where, str) else where_of(TRAIN_PY, fault) if where else ""
    return Incident(
        name=f"{client}-{fault}",
        client=client,
        description=f"{who} {what}",
        run=run,
        expected=Expected(kinds, (FAULT_RANK,), at),
    )


def where_of(path: str, marker: str) -> str:
    """`file.py:LINE` of the line tagged `# incident: MARKER` in `path` (the culprit's line)."""
    tag = re.compile(rf"#\s*incident:.*\b{re.escape(marker)}\b")
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if tag.search(line):
                return f"{os.path.basename(path)}:{number}"
    raise LookupError(f"no '# incident: {marker}' line in {path}")


def mark_symptom(job_dir: str) -> None:
    """Called by the faulty rank as its symptom begins: the clock of time-to-verdict starts here."""
    path = os.path.join(job_dir, "symptom")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.replace(path + ".tmp", path)


def stopped(job_dir: str) -> bool:
    return os.path.exists(os.path.join(job_dir, "stop"))


def free_port() -> tuple[str, int]:
    """This node's address and a free port: rank 0's rendezvous for a gloo group."""
    with socket.socket() as s:
        s.bind(("", 0))
        return socket.gethostbyname(socket.gethostname()), s.getsockname()[1]


def join_gloo(host: str, port: int, rank: int, world: int, timeout_s: float = 600.0) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{host}:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )
