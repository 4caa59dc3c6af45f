"""`stacks` and `hang` at 4,096 ranks print a screen, not a line per rank (issue 20); `--all`
prints everything. Synthetic reports, no Ray."""

from __future__ import annotations

import time

from rich.console import Console

from rankscope.context import RankContext
from rankscope.hang.model import FindingKind, GroupState, HangFinding, HangReport
from rankscope.hang.render import render_hang
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.stacks.analysis import group_stacks
from rankscope.stacks.model import Frame, ProcessStacks, ThreadStack
from rankscope.stacks.render import pick_groups, render_stacks, short_label

RANKS = 4096
LIB = "/venv/lib/python3.11/site-packages/"
RAY_LOOP = Frame("main_loop", LIB + "ray/_private/worker.py", 900, True)
ALL_REDUCE = (
    Frame("all_reduce", LIB + "torch/distributed/distributed_c10d.py", 2500, True),
    Frame("train_step", "/job/train.py", 88, False),
    RAY_LOOP,
)
IDLE = (Frame("wait", "/usr/lib/python3.11/threading.py", 327, True), RAY_LOOP)


def _status(rank: int) -> ProbeStatus:
    ctx = RankContext(
        rank, rank % 8, RANKS, f"node-{rank // 8}", "10.0.0.1", f"host-{rank // 8}",
        1000 + rank, "job", None, "Worker", None, "explicit", "10.0.0.1:29500",
    )  # fmt: skip
    info = ProbeInfo(f"p{rank}", ctx, "0", 0.0)
    now = time.time()
    return ProbeStatus(info, ProbeState.ALIVE, now, now, Progress(5, now), 0, 0)


def _odd(rank: int) -> tuple[Frame, ...]:
    """A stack of its own: the data loader at a line of its own."""
    return (Frame("load_batch", "/job/data.py", 100 + rank, False), RAY_LOOP)


def _processes() -> list[ProcessStacks]:
    """4,096 ranks: most in all_reduce, 40 each somewhere of their own, 300 without a stack
    (two reasons), 200 answered by py-spy only; every process has an idle helper thread."""
    out = []
    for rank in range(RANKS):
        status = _status(rank)
        if rank % 13 == 5 and rank < 13 * 300:
            why = "probe did not answer within 2s" if rank % 2 else "py-spy: permission denied"
            out.append(ProcessStacks(status, (), "none", why))
            continue
        main = _odd(rank) if rank % 100 == 7 and rank < 4000 else ALL_REDUCE
        threads = (ThreadStack("MainThread", 1, True, main), ThreadStack("pin", 2, False, IDLE))
        if rank % 17 == 3 and rank < 17 * 200:
            out.append(ProcessStacks(status, threads, "py-spy", "probe did not answer within 2s"))
        else:
            out.append(ProcessStacks(status, threads, "probe"))
    return out


def _lines(renderable: object) -> list[str]:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text().splitlines()


def test_stacks_at_4096_ranks_fit_a_screen_and_all_shows_everything():
    report = group_stacks("job", _processes())
    assert len(report.groups) > 30  # the odd ranks each have their own stack
    short = _lines(render_stacks(report))
    assert len(short) < 80, "\n".join(short)
    text = "\n".join(short)
    # the biggest group (all_reduce) is always shown, with its ranks folded into one line
    assert "all_reduce <- train_step train.py:88" in text
    assert "more distinct stacks" in text and "--all shows them" in text
    # missing stacks: one line per reason, ranks folded; py-spy'd ranks: one line per reason
    assert sum("no stack:" in line for line in short) == 2
    assert 1 <= sum("unresponsive:" in line for line in short) <= 2  # per stack, not rank
    assert max(len(line) for line in short) < 400
    everything = _lines(render_stacks(report, show_all=True))
    assert len(everything) > 300 + 200 + 40  # a line per missing rank, per py-spy'd rank, ...
    assert "more distinct stacks" not in "\n".join(everything)


def test_pick_groups_keeps_the_biggest_and_report_order():
    report = group_stacks("job", _processes())
    busy = [g for g in report.groups if not g.idle]
    shown, hidden = pick_groups(busy, 5)
    assert len(shown) == 5 and len(shown) + len(hidden) == len(busy)
    assert max(busy, key=lambda g: g.process_count) in shown
    assert shown == [g for g in busy if g in shown]  # order kept
    assert pick_groups(busy[:3], 5) == (busy[:3], [])


def test_short_label_cuts_at_a_comma_and_counts():
    label = "ranks " + ",".join(str(r) for r in range(0, 4096, 2))
    cut = short_label(label, 2048, limit=60)
    assert len(cut) < 90 and cut.endswith(",... (2,048 processes)")
    assert cut.split(",... ")[0].rsplit(",", 1)[1].isdigit()
    assert short_label("ranks 0-4095", 4096) == "ranks 0-4095"


def test_hang_with_thousands_of_groups_lists_a_few():
    groups = tuple(
        GroupState(f"dp{i}", tuple(range(i, RANKS, 512)), 100, (i,) if i == 300 else ())
        for i in range(512)
    )
    findings = tuple(
        HangFinding(FindingKind.HANG, f"group dp{i}: rank {i} never came", f"dp{i}", (i,))
        for i in range(20)
    )
    report = HangReport("job", time.time(), findings, groups, missing_ranks=(5, 6, 7))
    short = _lines(render_hang(report))
    assert len(short) < 25, "\n".join(short)
    text = "\n".join(short)
    assert "group dp300 " in text  # the group with a rank waiting comes first
    assert "12 more findings" in text and "504 more collective groups" in text
    assert len(_lines(render_hang(report, show_all=True))) == 1 + 20 + 512 + 1


def test_debug_list_says_plainly_that_debugpy_has_no_token():
    from rankscope.debug.model import AttachRoute, DebugSession, SessionListing
    from rankscope.debug.render import render_sessions

    fields = dict(
        id="ab12cd34", job_id="01000000", rank=3, world_size=4, node_id="n1", node_ip="10.0.0.5",
        hostname="w1", pid=1234, actor_class="Worker", probe_id="p1", host="127.0.0.1",
        port=40000, reason="breakpoint", name=None, filename="/app/train.py", lineno=42,
        function="step", stack=(), since=0.0, timeout=600.0, state="waiting", sync=False,
        cwd="/app",
    )  # fmt: skip
    route = AttachRoute(False, "127.0.0.1", 40000, "")
    for backend, warned in (("debugpy", True), ("pdb", False)):
        session = DebugSession(backend=backend, **fields)  # type: ignore[arg-type]
        listing = SessionListing("01000000", (session,), (), (), ())
        text = "\n".join(_lines(render_sessions(listing, {session.id: route})))
        assert ("debugpy asks no token" in text) is warned, text
