"""A probe simulator: many simulated probes in one process, against the REAL hub (issue 20).

Each simulated probe speaks the real protocol through the real hub actor, as `runtime/probe.py`
does: `register`, then a loop of `poll` (the heartbeat and long poll: progress, the summaries a
real probe sends with every heartbeat, the events it batched), and a `reply` to every command
the poll hands back. `stacks`, `children` and `collectives` are answered with payloads shaped and
sized like a real training rank's (a main thread in all_reduce plus helper threads; a 2,000-call
collective ring buffer); any other command gets the real probe's "unknown command" error. A few
ranks are "odd" (stuck in the data loader instead of all_reduce: one in 997, and the last) so
`stacks`/`hang` have something to single out. The ranks step every `--step-s` (their heartbeats
and answers say so, as `rankscope.step()` makes a real probe's) until SIGUSR1 stalls them where
they are: then the job is hung, and `stacks` finds the odd ranks; their answers say since when
the others wait in all_reduce, as a real probe's recorder does (SIGUSR2: they do not, as at the
level `off`, and `stacks` takes its confirming look).

The probes are asyncio tasks in one Ray actor (`SimHost`, on this node, owned by this process);
the hub sees them as processes of that actor (pid, node), so its liveness check finds them
alive while the simulator runs. Several simulators (`--start-rank`) make one job of up to
thousands of ranks. The simulated nodes' relays live in the same actor, which answers the CLI's
fan-outs to them (`commands`) as each node's relay actor would.

Run: python benchmarks/probe_sim.py --address HOST:PORT --job sim --probes 1024 \\
        --start-rank 0 --world 4096 --duration 60 --out stats.json
It prints `registered N` once every probe is registered, and writes its statistics (each
heartbeat's completion time and its lateness beyond the long poll's wait, commands answered, the
longest heartbeat interval the hub asked for) to `--out` when it ends. As the real probe, each
simulated probe sends its groups' rank lists once after registering (`PollRequest.groups`) and
waits in each poll as long as the hub's last reply asked (`PollReply.interval`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import random
import sys
import time
from typing import Any

from rankscope._version import __version__
from rankscope.context import RankContext
from rankscope.hang.model import CallState, CollectiveRecord, RecorderSnapshot
from rankscope.hang.worker import INLINE_RANKS, WINDOW_PER_GROUP
from rankscope.logs.model import TemplateStat
from rankscope.logs.worker_summary import within_share
from rankscope.monitor.model import MemoryUse, MonitorSummary
from rankscope.runtime.protocol import (
    BatchReply,
    Command,
    CommandResult,
    Event,
    PollRequest,
    ProbeInfo,
    Progress,
    Summaries,
)
from rankscope.runtime.relay import RelayCore
from rankscope.stacks.model import Frame, ThreadStack, active_thread, headline
from rankscope.stacks.worker import spacing_wait

RANKS_PER_NODE = 8
"""Simulated ranks per simulated node: each node's ranks share one relay when the hub asks."""
GROUP = "10.0.0.1:29500"
"""The rendezvous every simulated rank shares (one group of ranks)."""
SUMMARY_RECORDS = 16
"""As `hang.worker.SUMMARY_RECORDS`: collective records sent with every heartbeat."""
RING_RECORDS = 2000
"""As `hang.worker_recorder.DEFAULT_CAPACITY`: the ring buffer a `collectives` command returns."""
ODD_EVERY = 997
"""One rank in this many is odd (in the data loader, not all_reduce), and the job's last."""


def is_odd(rank: int, world: int) -> bool:
    """In the data loader while the others are in all_reduce: one rank in ODD_EVERY, and the
    last, so that a job of any size has one."""
    return rank % ODD_EVERY == ODD_EVERY - 1 or rank == world - 1


STEP_S = 0.5
"""A simulated rank steps this often (`--step-s`) until the simulator is stalled."""

SITE = "/opt/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def _frame(function: str, filename: str, lineno: int) -> Frame:
    library = filename.startswith((SITE, STDLIB))
    return Frame(function, filename, lineno, library)


def _ray_task_frames() -> list[Frame]:
    ray = f"{SITE}/ray/_private"
    return [
        _frame("actor_method_executor", f"{ray}/function_manager.py", 726),
        _frame("_resume_span", f"{SITE}/ray/util/tracing/tracing_helper.py", 467),
        _frame("main_loop", f"{ray}/worker.py", 946),
        _frame("<module>", f"{ray}/workers/default_worker.py", 297),
    ]


def main_thread(odd: bool) -> ThreadStack:
    """A training rank's main thread: in all_reduce (or, odd, in the data loader)."""
    user = "/home/user/project/train.py"
    if odd:
        inner = [
            _frame("_recv", f"{STDLIB}/multiprocessing/connection.py", 379),
            _frame("recv", f"{STDLIB}/multiprocessing/connection.py", 250),
            _frame("_get_data", f"{SITE}/torch/utils/data/dataloader.py", 1295),
            _frame("_next_data", f"{SITE}/torch/utils/data/dataloader.py", 1459),
            _frame("__next__", f"{SITE}/torch/utils/data/dataloader.py", 701),
            _frame("next_batch", "/home/user/project/data.py", 41),
        ]
    else:
        inner = [
            _frame("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 2801),
            _frame("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 81),
            _frame("_reduce_grads", f"{SITE}/torch/nn/parallel/distributed.py", 1381),
            _frame("backward", f"{SITE}/torch/autograd/__init__.py", 347),
            _frame("backward", f"{SITE}/torch/_tensor.py", 648),
        ]
    frames = [
        *inner,
        _frame("train_step", user, 88),
        _frame("fit", user, 140),
        _frame("train", "/home/user/project/worker.py", 57),
        *_ray_task_frames(),
    ]
    return ThreadStack("MainThread", 140000000000001, True, tuple(frames))


def helper_threads() -> tuple[ThreadStack, ...]:
    """The idle threads a training process has: pin-memory, a checkpoint pool, Ray's loops."""
    wait = [
        _frame("wait", f"{STDLIB}/threading.py", 327),
        _frame("get", f"{STDLIB}/queue.py", 180),
    ]
    run = [
        _frame("run", f"{STDLIB}/threading.py", 982),
        _frame("_bootstrap_inner", f"{STDLIB}/threading.py", 1045),
        _frame("_bootstrap", f"{STDLIB}/threading.py", 1002),
    ]
    pin = [_frame("_pin_memory_loop", f"{SITE}/torch/utils/data/_utils/pin_memory.py", 53)]
    pool = [_frame("_worker", f"{STDLIB}/concurrent/futures/thread.py", 81)]
    return (
        ThreadStack("Thread-1 (_pin_memory_loop)", 140000000000002, False, (*wait, *pin, *run)),
        ThreadStack("ThreadPoolExecutor-0_0", 140000000000003, False, (*wait, *pool, *run)),
        ThreadStack("ray_listen_error_messages", 140000000000004, False, (*wait, *run)),
    )


def stacks_payload(rank: int, world: int) -> tuple[ThreadStack, ...]:
    """What the `stacks` command returns: every Python thread, innermost frame first."""
    return (main_thread(is_odd(rank, world)), *helper_threads())


def where_now(threads: tuple[ThreadStack, ...]) -> str | None:
    """What the `where` command returns: the busiest thread's headline."""
    thread = active_thread(threads)
    return None if thread is None else headline(thread.frames)


def collective_records(rank: int, count: int, now: float) -> tuple[CollectiveRecord, ...]:
    """The last `count` collectives of a data-parallel rank: gradient all_reduces, a
    broadcast now and then; the newest one still running (it waits for the others)."""
    out = []
    first = max(1, 10_000 - count + 1)
    for i, seq in enumerate(range(first, first + count)):
        last = i == count - 1
        op = "broadcast" if seq % 50 == 0 else "all_reduce"
        start = now - (count - i) * 0.05
        out.append(
            CollectiveRecord(
                group="0",
                seq=seq,
                op=op,
                shapes=((4096, 4096),) if op == "all_reduce" else ((1024,),),
                dtypes=("float32",),
                start=start,
                end=None if last else start + 0.01,
                state=CallState.STARTED if last else CallState.COMPLETED,
                caller="/home/user/project/train.py:88",
            )
        )
    return tuple(out)


def groups(world: int) -> dict[str, tuple[int, ...]]:
    """The groups a rank used with ALL their ranks (the default group of a data-parallel job
    holds every rank of the world): what `hang.worker.seen_groups` sends the hub once."""
    return {"0": tuple(range(world))}


def recorder_snapshot(
    rank: int, world: int, count: int, now: float, with_groups: bool = True
) -> RecorderSnapshot:
    """As the recorder's `snapshot()`: its records, and the groups seen (not in a heartbeat's
    summary: `with_groups=False`, as `hang.worker.last_collectives`)."""
    return RecorderSnapshot(
        records=collective_records(rank, count, now),
        groups=groups(world) if with_groups else {},
        dropped=max(0, 10_000 - RING_RECORDS),
        recording=True,
    )


def logs_summary() -> dict[str, Any]:
    """As `logs.worker_summary`'s: a busy trainer's log templates (per-step lines, rollout and
    checkpoint lines, a few warnings), as many as fit the summary's share of the heartbeat."""
    now = time.time()
    lines = [
        ("INFO", "step <n> loss=<n> lr=<n> grad_norm=<n> tokens/s=<n>", 3),
        ("INFO", "rollout batch <n> generated <n> sequences in <n>s (<n> tokens/s)", 4),
        ("INFO", "saving checkpoint to /checkpoints/run-<n>/global_step_<n>", 2),
        ("INFO", "actor update: pg_loss=<n> entropy=<n> kl=<n> clip_frac=<n>", 4),
        ("INFO", "critic update: vf_loss=<n> vf_clip_frac=<n> values_mean=<n>", 3),
        ("INFO", "timing/gen=<n> timing/ref=<n> timing/values=<n> timing/update_actor=<n>", 4),
        ("INFO", "dataloader epoch <n> shard <n> of <n> opened", 3),
        ("WARNING", "rollout worker <n> slow: <n>s behind the median", 2),
        ("WARNING", "kv cache usage <n>% on replica <n>: preempting <n> sequences", 3),
        ("INFO", "validation: score=<n> on <n> prompts (<n>s)", 3),
        ("INFO", "memory allocated=<n> GiB reserved=<n> GiB peak=<n> GiB", 3),
        ("INFO", "weights synced to the inference engine in <n>s (<n> GiB)", 2),
    ]
    stats = [
        TemplateStat(
            level, text, 1000 - 50 * i, now - 3600, now, (0.0,) * n, (1e4,) * n, (5e3,) * n
        )
        for i, (level, text, n) in enumerate(lines)
    ]
    head = {"time": now, "counts": {"INFO": 24_000, "WARNING": 90}, "unsummarized": 0}
    return within_share(head, stats)


LOGS = logs_summary()
"""Built once: the simulator runs as `__main__` and its actor is pickled by value, which a
cached function is not."""
MONITOR = MonitorSummary(
    step=1000, step_s=0.82, tokens_per_s=48_213.5, loss=1.93, grad_norm=0.71, wait_s=0.05,
    memory=MemoryUse(61 << 30, 80 << 30, 120 << 30, 2 << 40), loss_level=1.95,
)  # fmt: skip
"""As `monitor.worker.summary`'s for a rank stepping with loss, tokens and grad_norm."""


def summaries(rank: int, world: int, now: float) -> Summaries:
    """What a real probe sends with every heartbeat: every feature's summary, sized as a busy
    trainer's (`where` and `collectives` from `hang.worker`, `logs`, `monitor`, `clock`;
    `alerts` is None while none fired)."""
    odd = is_odd(rank, world)
    where = "next_batch data.py:41" if odd else "all_reduce <- train_step train.py:88"
    return Summaries(
        {
            "collectives": recorder_snapshot(rank, world, SUMMARY_RECORDS, now, with_groups=False),
            "where": where,
            "monitor": MONITOR,
            "logs": LOGS,
            "clock": {"offset_s": 0.0012, "error_s": 0.0004},
            "alerts": None,
        }
    )


def heartbeat_bytes(world: int, first: bool = False) -> int:
    """The pickled size of one heartbeat (a PollRequest) of a rank in a world of `world`; the
    `first` after registering also carries the groups' rank lists (`PollRequest.groups`)."""
    progress = Progress(step=1000, last_progress=time.time())
    request = PollRequest(
        "1234-abcdefabcdef",
        progress,
        (),
        0,
        summaries(1, world, time.time()),
        groups(world) if first else None,
    )
    return len(pickle.dumps(request))


class SimProbe:
    """One simulated probe: registers, heartbeats, answers commands."""

    def __init__(self, sim: Simulator, rank: int) -> None:
        self.sim = sim
        self.rank = rank
        self.probe_id = f"{os.getpid()}-sim{rank:06d}"
        self.beats = 0
        self.last_stacks: float | None = None
        """When it last answered `stacks` (monotonic), for a confirming look's spacing."""
        self._answers: dict[str, CommandResult] = {}

    def prepare(self) -> None:
        """Build and pickle the canned answers before anything is measured. A real rank builds
        its own answer in its own process; the simulator building 1,024 ranks' answers when a
        command first came, on the cores the hub and the CLI share, charged that command for
        it (the first `hang` of a run took ~1 s longer)."""
        for kind in ("stacks", "where", "children"):
            pickle.dumps(self.answer(Command("prepare", kind)))
        for per_group in (None, WINDOW_PER_GROUP):
            pickle.dumps(self.answer(Command("prepare", "collectives", {"per_group": per_group})))

    def _cached(self, kind: str, build: Any) -> CommandResult:
        if kind not in self._answers:
            self._answers[kind] = CommandResult(self.probe_id, True, payload=build())
        return self._answers[kind].answered(self.progress(), time.time())

    def info(self) -> ProbeInfo:
        s = self.sim
        context = RankContext(
            rank=self.rank,
            local_rank=self.rank % 8,
            world_size=s.world,
            node_id=s.node_id,
            node_ip=s.node_ip,
            hostname=f"sim-node-{self.rank // RANKS_PER_NODE:04d}",
            pid=os.getpid(),
            job_id=s.job_id,
            actor_id=None,
            actor_class="SimWorker",
            task_id=None,
            rank_source="explicit",
            group=GROUP,
        )
        return ProbeInfo(self.probe_id, context, __version__, s.create_time)

    def progress(self) -> Progress:
        """As a training rank that steps every `--step-s` (`rankscope.step()`), in its
        all_reduce since the step began, until the simulator is told to stall (`SimHost.stall`):
        then in it since the stall (the odd ranks never entered it), as its recorder says, or
        unknown as at the level `off`."""
        s = self.sim
        now = time.time() if s.stalled_at is None else s.stalled_at
        step = max(1, int((now - s.started) / s.step_s))
        last = s.started + step * s.step_s
        waiting_since: float | None = last
        if s.stalled_at is not None:
            odd = is_odd(self.rank, s.world)
            waiting_since = None if odd or not s.waits_known else s.stalled_at
        return Progress(step, last, waiting_since)

    async def run(self) -> None:
        s = self.sim
        await asyncio.sleep(random.random() * s.interval)  # real probes start spread out
        await s.hub.register.remote(self.info(), self.progress())
        s.registered += 1
        groups_sent = False  # as the real probe: the rank lists once after registering
        wait = s.interval  # as the real probe: the interval the hub's last reply asked for
        use_relay = False
        while not s.stopping:
            self.beats += 1
            events: tuple[Event, ...] = ()
            if s.event_every and self.beats % s.event_every == 0:
                events = (Event("sim.tick", time.time(), {"rank": self.rank, "beat": self.beats}),)
            now = time.time()
            request = PollRequest(
                self.probe_id,
                self.progress(),
                events,
                0,
                summaries(self.rank, s.world, now),
                None if groups_sent else groups(s.world),
            )
            sent = time.time()
            relay = s.relay_for(self.rank) if use_relay else None
            try:
                if relay is not None:
                    reply = await relay.poll(request, wait)
                else:
                    reply = await s.hub.poll.remote(request, wait)
            except Exception as exc:  # the hub restarted or is gone: back off, register again
                s.errors += 1
                s.last_error = f"{type(exc).__name__}: {exc}"[:200]
                await asyncio.sleep(s.interval)
                await self._register_again()
                groups_sent = False
                continue
            done = time.time()
            late = max(0.0, done - sent - wait)  # past the long poll's wait
            s.beats.append((round(done, 4), round(late, 4), len(reply.commands)))
            if reply.interval:
                wait = reply.interval
                s.asked = max(s.asked, wait)
            if relay is None:  # as RelayLink: through the node's relay when the hub asks
                use_relay = s.relays and reply.relay
            if not reply.known:
                await self._register_again()
                groups_sent = False
                continue
            groups_sent = True
            for command in reply.commands:
                await self._spaced(command)
                if relay is not None:
                    relay.reply(self.answer(command), command.id)
                else:
                    s.hub.reply.remote(self.answer(command), command.id)
                s.answered += 1

    async def _spaced(self, command: Command) -> None:
        """As `stacks.worker.LookSpacing`: a `stacks` with `apart_s` is answered that long
        after this rank's previous one at most (waiting here holds no other rank)."""
        if command.kind != "stacks":
            return
        apart_s = float(command.args.get("apart_s", 0.0))
        await asyncio.sleep(spacing_wait(self.last_stacks, apart_s, time.monotonic()))
        self.last_stacks = time.monotonic()

    async def _register_again(self) -> None:
        try:
            await self.sim.hub.register.remote(self.info(), self.progress())
            self.sim.reregistered += 1
        except Exception:
            self.sim.errors += 1

    def answer(self, command: Command) -> CommandResult:
        """As `Probe.run_command` with the real handlers' payload shapes. Built once per rank
        and kept: one simulator answers for many ranks on one core, a real rank for itself."""
        if command.kind == "stacks":
            return self._cached("stacks", lambda: stacks_payload(self.rank, self.sim.world))
        if command.kind == "where":  # as hang.worker.where_now
            return self._cached(
                "where", lambda: where_now(stacks_payload(self.rank, self.sim.world))
            )
        if command.kind == "children":
            return self._cached("children", tuple)
        if command.kind == "collectives":  # one group: its newest `per_group`, as the probe
            ring, world = min(self.sim.ring, command.args.get("per_group") or 10**9), self.sim.world
            return self._cached(
                f"collectives-{ring}",  # as hang.worker: rank lists inline only for small groups
                lambda: recorder_snapshot(
                    self.rank, world, ring, time.time(), with_groups=world <= INLINE_RANKS
                ),
            )
        return CommandResult(self.probe_id, False, error=f"unknown command {command.kind}")


class _SimHub:
    """The hub as a simulated node's relay calls it (as `relay_actor._HubHandle`)."""

    def __init__(self, hub: Any, delays: list[tuple[float, float]]) -> None:
        self.hub = hub
        self.delays = delays
        """(seconds from the hub's answer with commands to its arrival here, seconds a reply
        batch took), one per batch: where a command's round trip goes."""

    async def poll_batch(
        self,
        relay_id: str,
        entries: list[tuple[str, PollRequest]],
        wait_s: float,
        results: list[tuple[CommandResult, str]],
        endpoint: Any,
    ) -> BatchReply:
        reply: BatchReply = await self.hub.poll_batch.remote(
            relay_id, entries, wait_s, results, endpoint
        )
        if any(commands for _, commands in reply.replies.values()):
            self.delays.append((round(time.time() - reply.hub_replied, 4), -1.0))
        return reply

    async def reply_batch(self, results: list[tuple[CommandResult, str]]) -> None:
        start = time.time()
        await self.hub.reply_batch.remote(results)
        self.delays.append((-1.0, round(time.time() - start, 4)))


class Simulator:
    """`probes` simulated probes of ranks start_rank.. in one job, in this process."""

    def __init__(self, hub: Any, args: argparse.Namespace, endpoint: Any = None) -> None:
        import psutil
        import ray

        self.hub = hub
        self.endpoint = endpoint
        """What the CLI calls `commands` on for this simulator's relays (its `SimHost`)."""
        self.job_id = args.job
        self.world = args.world or args.start_rank + args.probes
        self.interval = args.interval
        self.event_every = args.event_every
        self.ring = args.ring
        self.node_id = ray.get_runtime_context().get_node_id()
        self.node_ip = ray.util.get_node_ip_address()
        self.create_time = float(psutil.Process().create_time())
        self.started = time.time()
        self.step_s = args.step_s
        self.stalled_at: float | None = None
        """Since when its ranks no longer step (`SimHost.stall`); None while they train."""
        self.waits_known = True
        """Whether its stalled ranks say since when they wait (their recorders record)."""
        self.probes = [
            SimProbe(self, r) for r in range(args.start_rank, args.start_rank + args.probes)
        ]
        for probe in self.probes:
            probe.prepare()
        self.registered = self.reregistered = self.answered = self.errors = 0
        self.last_error = ""
        self.stopping = False
        self.beats: list[tuple[float, float, int]] = []
        """(completion time, seconds past the long poll's wait, commands) per heartbeat."""
        self.asked = 0.0
        """The longest heartbeat interval the hub asked for (`PollReply.interval`)."""
        self.relays = args.relays
        self.delays: list[tuple[float, float]] = []
        self._relays: dict[int, RelayCore] = {}
        """One relay per simulated node, hosted here: the REAL relay logic (`RelayCore`), which
        on a cluster runs in an actor on each node's own CPU."""
        self.relays_by_id: dict[str, RelayCore] = {}

    def relay_for(self, rank: int) -> RelayCore:
        node = rank // RANKS_PER_NODE
        if node not in self._relays:
            relay_id = f"{self.node_id}-sim{os.getpid()}-{node}"
            hub = _SimHub(self.hub, self.delays)
            relay = self._relays[node] = RelayCore(relay_id, hub, endpoint=self.endpoint)
            self.relays_by_id[relay_id] = relay
        return self._relays[node]

    async def run(self, duration: float) -> None:
        tasks = [asyncio.ensure_future(p.run()) for p in self.probes]
        deadline = time.time() + duration
        while not self.stopping and time.time() < deadline:
            await asyncio.sleep(0.2)
        self.stopping = True
        await asyncio.wait(tasks, timeout=self.interval + 5.0)

    def stop(self) -> None:
        """Stop heartbeating; the statistics are written on the way out."""
        self.stopping = True

    def stats(self) -> dict[str, Any]:
        return {
            "probes": len(self.probes),
            "registered": self.registered,
            "reregistered": self.reregistered,
            "answered": self.answered,
            "errors": self.errors,
            "last_error": self.last_error,
            "interval": self.interval,
            "asked_interval": self.asked,
            "relays": len(self._relays),
            "relay_batches": sum(r.batches for r in self._relays.values()),
            "relay_delays": self.delays,
            "beats": self.beats,
        }


class SimHost:
    """The Ray actor a simulator runs in: its probes and its simulated nodes' relays, which
    the CLI's fan-outs call directly (`commands`), as they call a node's relay actor."""

    def __init__(self, hub: Any, args: argparse.Namespace) -> None:
        import ray

        self.sim = Simulator(hub, args, endpoint=ray.get_runtime_context().current_actor)

    async def run(self, duration: float) -> dict[str, Any]:
        await self.sim.run(duration)
        return self.sim.stats()

    async def registered(self) -> int:
        return self.sim.registered

    async def stop(self) -> None:
        self.sim.stop()

    async def stall(self, waits_known: bool) -> None:
        """Its ranks stop stepping, in the places they are: a hung job; `waits_known`: their
        answers say since when they wait in their collective (the level `off`: they do not)."""
        self.sim.stalled_at = self.sim.stalled_at or time.time()
        self.sim.waits_known = waits_known

    async def commands(
        self, relay_id: str, asks: list[tuple[Command, tuple[str, ...]]], deadline_s: float
    ) -> dict[str, list[CommandResult]]:
        relay = self.sim.relays_by_id.get(relay_id)
        return {} if relay is None else await relay.commands(asks, deadline_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--job", default="sim")
    parser.add_argument("--probes", type=int, default=64)
    parser.add_argument("--start-rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=0, help="ranks in the job (default: ours)")
    parser.add_argument("--interval", type=float, default=1.0, help="heartbeat (long poll) s")
    parser.add_argument(
        "--ring", type=int, default=RING_RECORDS, help="records a `collectives` reply holds"
    )
    parser.add_argument("--event-every", type=int, default=0, help="an event every N beats")
    parser.add_argument(
        "--no-relays", dest="relays", action="store_false",
        help="poll the hub directly even when it asks for node relays",
    )  # fmt: skip
    parser.add_argument("--step-s", type=float, default=STEP_S, help="a training step every s")
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    import logging
    import signal

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rankscope.config import Config
    from rankscope.runtime.hub import get_or_create_hub

    ray.init(address=args.address, logging_level=logging.ERROR, log_to_driver=False)
    hub = get_or_create_hub(Config.from_env())
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    host = (
        ray.remote(SimHost)
        .options(num_cpus=0, max_concurrency=10_000, scheduling_strategy=here)
        .remote(hub, args)
    )
    stopping = False
    stall: bool | None = None
    """Asked to stall (SIGUSR1: the waits known, SIGUSR2: not); None: not asked since."""

    def stop(*_: Any) -> None:  # SIGTERM: stop heartbeating, write the statistics, go
        nonlocal stopping
        stopping = True

    def stall_ranks(signum: int, _: Any) -> None:  # the ranks stop stepping (a hung job)
        nonlocal stall
        stall = signum == signal.SIGUSR1

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, stall_ranks)
    signal.signal(signal.SIGUSR2, stall_ranks)
    running = host.run.remote(args.duration)
    try:
        registered = 0
        while registered < args.probes and not stopping and not ray.wait([running], timeout=0)[0]:
            registered = ray.get(host.registered.remote())
            time.sleep(0.2)
        print(f"registered {registered}", flush=True)
        while not stopping and not ray.wait([running], timeout=0.2)[0]:
            if stall is not None:
                ray.get(host.stall.remote(stall))
                print("stalled", flush=True)
                stall = None
        ray.get(host.stop.remote())
        stats = ray.get(running)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(stats, f)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
