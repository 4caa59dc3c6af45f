"""`rankscope logs` for ranks on a node that is gone (synthetic registry rows, no Ray): their
lines come from the hub's last log summaries, merged with the others, under one note naming
the node."""

from __future__ import annotations

from dataclasses import asdict

from rankscope.context import RankContext
from rankscope.logs.analysis import LogFilter, fold_lines, merge_lines
from rankscope.logs.gone import gone_node_logs
from rankscope.logs.model import JobLogs, LogLine, TemplateStat
from rankscope.logs.render import render_logs
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

NOW = 1_700_000_000.0
LIVE, GONE = "10.0.0.1", "10.0.0.2"


def _probe(rank: int, ip: str, templates: list[TemplateStat], reason: str = "") -> ProbeStatus:
    ctx = RankContext(
        rank, rank % 2, 4, "n", ip, f"host-{ip[-1]}", 100 + rank, "job", None, "Worker", None,
        "env", "g",
    )  # fmt: skip
    logs = {"time": NOW, "counts": {}, "templates": [asdict(t) for t in templates]}
    state = ProbeState.DEAD if reason else ProbeState.ALIVE
    return ProbeStatus(
        ProbeInfo(f"p{rank}", ctx, "0", NOW), state, NOW, NOW, Progress(9, NOW), 0, 0,
        {"logs": logs}, reason,
    )  # fmt: skip


TEMPLATES = [
    TemplateStat("INFO", "step <n> loss=<n>", 40, NOW - 60, NOW - 2, (1.0, 0.31), (40.0, 0.52)),
    TemplateStat("ERROR", "about to die on <hex>", 1, NOW - 1, NOW - 1),
]


def _job() -> list[ProbeStatus]:
    return [
        _probe(0, LIVE, TEMPLATES),  # its files are read on its node: not from the summary
        _probe(2, GONE, TEMPLATES, reason="node gone: raylet died"),
        _probe(3, GONE, TEMPLATES[:1], reason="node gone: raylet died"),
    ]


def test_gone_ranks_show_their_last_summary_under_a_note_naming_the_node():
    lines, notes = gone_node_logs(_job(), {LIVE}, LogFilter(now=NOW))
    assert notes == [
        "node 10.0.0.2 (host-2) is gone (node gone: raylet died): its log files cannot be read; "
        "ranks 2,3: 3 lines from the last log summary each sent the hub (one per template, "
        "with its count and number range)"
    ]
    assert sorted((ln.rank, ln.level, ln.message) for ln in lines) == [
        (2, "ERROR", "about to die on <hex>"),
        (2, "INFO", "step 1..40 loss=0.31..0.52 (x40)"),
        (3, "INFO", "step 1..40 loss=0.31..0.52 (x40)"),
    ]
    assert all(ln.source == "summary" and ln.node == "host-2" for ln in lines)


def test_filters_apply_and_a_node_with_no_selected_rank_gets_no_note():
    lines, notes = gone_node_logs(_job(), {LIVE}, LogFilter(min_level="ERROR", now=NOW))
    assert [(ln.rank, ln.message) for ln in lines] == [(2, "about to die on <hex>")]
    assert "rank 2,3" not in notes[0] and "ranks 2,3: 1 lines" in notes[0]
    assert gone_node_logs(_job(), {LIVE}, LogFilter(ranks=frozenset({0}), now=NOW)) == ([], [])
    assert gone_node_logs(_job(), {LIVE, GONE}, LogFilter(now=NOW)) == ([], [])  # node back


def test_the_note_is_shown_and_summary_lines_fold_with_the_live_ones():
    lines, notes = gone_node_logs(_job(), {LIVE}, LogFilter(now=NOW))
    live = [LogLine(NOW - 2, "step 40 loss=0.400", "INFO", 0, 100, "host-1")]
    folds = fold_lines(merge_lines([live, lines]))
    result = JobLogs("job", tuple(folds), (), 1, 0, (), tuple(notes))
    texts = [t.plain for t in render_logs(result)]
    assert texts[1].startswith("note: node 10.0.0.2 (host-2) is gone")
    assert any("ERROR   rank 2: about to die on <hex>" in t for t in texts), texts
