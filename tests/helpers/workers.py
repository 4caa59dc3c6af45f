"""User code the tests run inside Ray actors: gloo ranks that block, stall or spin.

Function names here (wait_for_data, spin_holding_the_gil, ...) are what the tests expect to
see in `rankscope stacks`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import ray

from rankscope.demo.gloo import GlooMember

# The custom resource of the session cluster's second node (see conftest.py).
WORKER_NODE_RESOURCE = "second_node"


class GlooRank(GlooMember):
    """One rank of a gloo group; the probe is started explicitly with rankscope.init()."""

    join_timeout_s = 120.0

    def __init__(
        self,
        rank: int,
        world_size: int,
        explicit_rank: bool = False,
        hang_timeout: float | None = None,
    ) -> None:
        import rankscope

        self.rank, self.world_size = rank, world_size
        self.groups: dict[str, object] = {}
        if explicit_rank:
            rankscope.init(rank=rank, world_size=world_size, hang_timeout=hang_timeout)
        else:  # the rank comes from torch.distributed once the group forms
            rankscope.init(hang_timeout=hang_timeout)

    def pid(self) -> int:
        return os.getpid()

    def say(self, text: str) -> None:
        """A line on the worker's stderr: what a rank prints before it dies."""
        print(text, file=sys.stderr, flush=True)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def step_once(self, skip_until: str | None = None) -> None:
        """An all_reduce; a rank given `skip_until` waits for that file to exist instead."""
        import torch
        import torch.distributed as dist

        if skip_until is not None:
            wait_for_data(skip_until)
            return
        dist.all_reduce(torch.ones(4))

    def all_reduce_of(self, size: int) -> None:
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(size))

    def stop_recording(self) -> None:
        """Stands for collectives rankscope's recorder cannot see (FSDP2, DTensor, C++)."""
        import torch.distributed  # noqa: F401  (rankscope patches it on import: undo that)

        from rankscope.hang.worker_recorder import stop_recording

        stop_recording()

    def make_groups(self, layout: dict[str, list[list[int]]]) -> None:
        """Every rank creates every group, in the same order; keeps the ones it belongs to."""
        import torch.distributed as dist

        for kind, groups in layout.items():
            for members in groups:
                group = dist.new_group(members)
                if self.rank in members:
                    self.groups[kind] = group

    def group_all_reduce(self, kind: str, skip_until: str | None = None) -> None:
        import torch
        import torch.distributed as dist

        if skip_until is not None:
            wait_for_data(skip_until)
            return
        dist.all_reduce(torch.ones(2), group=self.groups[kind])

    def reduce_steps(self, steps: int) -> int:
        """A training loop of small all_reduces, marking each step for rankscope."""
        import torch
        import torch.distributed as dist

        import rankscope

        for _ in range(steps):
            dist.all_reduce(torch.ones(4))
            rankscope.step()
            time.sleep(0.01)
        return steps

    def train(self, steps: int, interval: float = 0.02) -> int:
        """A training loop that only sleeps and counts steps for rankscope."""
        import rankscope

        for _ in range(steps):
            time.sleep(interval)
            rankscope.step()
        return steps

    def exchange(self, key: str, expected: list[int], deadline_s: float):
        from rankscope.runtime.rendezvous import exchange

        return exchange(key, self.rank, {"rank": self.rank}, expected, deadline_s=deadline_s)

    def note(self, text: str) -> None:
        """Report an event to the run directory, as features do."""
        import rankscope

        probe = rankscope.current_probe()
        assert probe is not None
        probe.emit("test.note", {"summary": text})

    def spin(self) -> None:
        spin_holding_the_gil()

    def wait_for(self, path: str) -> None:
        """User code that sleeps in a loop until `path` exists, without a step (nor torch)."""
        wait_for_data(path)

    def wait_in_thread(self, path: str) -> None:
        """Start a thread that waits for `path` in user code, and return (as Ray Train does)."""
        import threading

        threading.Thread(target=wait_for_data, args=(path,), name="train-loop", daemon=True).start()

    def watchdog_state(self) -> dict:
        """What this process's watchdog saw: its last check, why it fired, the last step."""
        from rankscope.hang.worker_watchdog import current_watchdog
        from rankscope.runtime.probe import progress

        watchdog = current_watchdog()
        assert watchdog is not None
        return {
            "last_check": watchdog.last_check,
            "busy_since": watchdog.busy_since,
            "triggers": [list(t) for t in watchdog.triggers],  # [when, why]
            "step": progress.step,
            "last_step": progress.last_progress,
        }


def wait_for_data(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)


def spin_holding_the_gil() -> None:
    """Catastrophic backtracking: CPython's regex engine keeps the GIL the whole time."""
    re.match(r"(a|aa)+$", "a" * 64 + "b")


def form_group(actors: list) -> None:
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors], timeout=120)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    """`predicate()`'s first true value, asked every `interval`, and at most half the time: a
    look that takes long (a `rankscope` command run as a subprocess, a second of CPU) is
    followed by a sleep as long, so the polls leave the cores to the job they watch."""
    deadline = time.time() + timeout
    while True:
        started = time.monotonic()
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(max(interval, time.monotonic() - started))


ENGINE = """
import time


def generate_tokens():
    while True:
        time.sleep(0.05)


generate_tokens()
"""


class EngineOwner:
    """A rollout worker that starts its inference engine as a child process, as verl's vLLM
    and SGLang workers do: the setup hook never reaches the child."""

    def __init__(self) -> None:
        import rankscope

        rankscope.init(rank=0, world_size=1, group="engine-test")
        self.engine: subprocess.Popen[bytes] | None = None

    def start_engine(self) -> int:
        self.engine = subprocess.Popen([sys.executable, "-c", ENGINE])
        return self.engine.pid

    def pid(self) -> int:
        return os.getpid()

    def stop_engine(self) -> None:
        if self.engine is not None:
            self.engine.kill()
            self.engine.wait()
