"""Templates, filters, the merge and the fold of `rankscope logs`, on synthetic lines."""

from __future__ import annotations

import pytest

from rankscope.errors import UserError
from rankscope.logs.analysis import (
    LogFilter,
    fold_lines,
    merge_lines,
    parse_duration,
    template_of,
)
from rankscope.logs.collect_reader import parse_jsonl_line
from rankscope.logs.model import LogLine
from rankscope.logs.render import fold_text


def _line(t: float, rank: int | None, message: str, level: str = "INFO", **kw) -> LogLine:
    return LogLine(time=t, message=message, level=level, rank=rank, pid=100 + (rank or 0), **kw)


def test_template_masks_numbers_and_hex_and_keeps_the_numbers():
    assert template_of("loss=0.31 at 0x7f3a") == ("loss=<n> at <hex>", ("0.31",))
    template, numbers = template_of("step 12/100 lr=1e-4 took 3.5s id deadbeef12 layer.10.w")
    assert template == "step <n>/<n> lr=<n> took <n>s id <hex> layer.10.w"
    assert numbers == ("12", "100", "1e-4", "3.5")


def test_four_ranks_fold_into_one_line_with_the_spread():
    lines = [
        _line(10.0 + r * 0.01, r, f"loss={v:.3f}") for r, v in enumerate([0.52, 0.31, 0.4, 0.45])
    ]
    lines += [_line(10.1 + r * 0.01, r, "grad norm is large", "WARNING") for r in range(4)]
    folds = fold_lines(merge_lines([lines]))
    assert [(f.text, f.ranks, f.count) for f in folds] == [
        ("loss=0.310..0.520", (0, 1, 2, 3), 4),
        ("grad norm is large", (0, 1, 2, 3), 4),
    ]
    assert fold_text(folds[0]).endswith("INFO    ranks 0-3: loss=0.310..0.520 (x4)")


def test_fold_window_and_single_lines_keep_their_text():
    lines = [_line(0.0, 0, "loss=0.5"), _line(1.0, 1, "loss=0.5"), _line(20.0, 0, "loss=0.7")]
    folds = fold_lines(lines)
    assert [(f.text, f.ranks) for f in folds] == [("loss=0.5", (0, 1)), ("loss=0.7", (0,))]


def test_merge_is_in_time_order_across_files():
    a = [_line(1.0, 0, "a1"), _line(3.0, 0, "a3")]
    b = [_line(2.0, 1, "b2"), _line(4.0, 1, "b4")]
    assert [ln.message for ln in merge_lines([a, b])] == ["a1", "b2", "a3", "b4"]


def test_filter_ranks_level_grep_since():
    f = LogFilter(frozenset({1}), "WARNING", r"norm", 60.0, now=1000.0)
    assert f.keeps(_line(990.0, 1, "grad norm 5", "ERROR"), f.pattern())
    assert not f.keeps(_line(990.0, 0, "grad norm 5", "ERROR"), f.pattern())  # rank
    assert not f.keeps(_line(990.0, 1, "grad norm 5", "INFO"), f.pattern())  # level
    assert not f.keeps(_line(900.0, 1, "grad norm 5", "ERROR"), f.pattern())  # since
    assert not f.keeps(_line(990.0, 1, "loss 5", "ERROR"), f.pattern())  # grep
    stderr = LogLine(time=990.0, message="Traceback norm", level="", rank=1, source="stderr")
    assert f.keeps(stderr, f.pattern())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_level": "LOUD"}, "--level 'LOUD' is not one of"),
        ({"grep": "("}, r"--grep '\(' is not a regular expression"),
    ],
)
def test_bad_filters_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        LogFilter(**kwargs)


def test_durations():
    assert parse_duration("10m") == 600.0
    assert parse_duration("2h") == 7200.0
    assert parse_duration("30") == 30.0
    for bad in ("5x", "-1s", "0s", "soon"):
        with pytest.raises(UserError, match="is not a duration"):
            parse_duration(bad, what="--since")


def test_jsonl_line_parses_and_foreign_lines_are_skipped():
    raw = '{"time":1.5,"level":"ERROR","logger":"t","message":"boom","rank":2,"pid":9,"exc":"Tb"}'
    line = parse_jsonl_line(raw, 3)
    assert line is not None
    assert (line.rank, line.level, line.exc, line.seq) == (2, "ERROR", "Tb", 3)
    assert parse_jsonl_line('{"time": 1', 0) is None  # cut by a SIGKILL mid-write
    assert parse_jsonl_line("[1, 2]", 0) is None


def test_follow_reads_each_file_on_from_where_it_stopped(tmp_path, monkeypatch):
    """--follow's reads: only complete lines written since the last read; a half-written line
    waits; a rotated file (renamed) is read on, the new one from its start; nothing twice."""
    import json
    import os

    from rankscope.logs.analysis import LogFilter
    from rankscope.logs.collect_reader import read_node

    monkeypatch.setenv("RANKSCOPE_LOG_DIR", str(tmp_path))
    (tmp_path / "job").mkdir()
    path = tmp_path / "job" / "7.jsonl"

    def rec(message: str) -> str:
        return json.dumps({"time": 1.0, "message": message, "pid": 7, "rank": 0}) + "\n"

    def read(offsets: dict[str, int]) -> tuple[list[str], dict[str, int]]:
        logs = read_node("job", {}, LogFilter(), 100, std_files=False, offsets=offsets)
        return [ln.message for ln in logs.lines], logs.offsets

    path.write_text(rec("a") + rec("b"))
    first, offsets = read({})
    assert first == ["a", "b"]
    with open(path, "a") as f:
        f.write(rec("c") + rec("d")[:10])
    second, offsets = read(offsets)
    assert second == ["c"]
    with open(path, "a") as f:
        f.write(rec("d")[10:])
    os.rename(path, f"{path}.1")
    path.write_text(rec("e"))
    third, offsets = read(offsets)
    assert third == ["d", "e"]
    assert read(offsets)[0] == []


def test_follow_reads_ray_out_files_on_and_only_their_tail(tmp_path, monkeypatch):
    from rankscope.logs import collect_reader
    from rankscope.logs.analysis import LogFilter

    out = tmp_path / "worker-1-7.out"
    out.write_text("hello\nwor")

    def read(offsets: dict[str, int] | None) -> tuple[list[str], dict[str, int]]:
        found, (key, end) = collect_reader._std_lines(
            str(out), "stdout", 7, 0, "host", LogFilter(), None, offsets
        )
        return [ln.message for ln in found], {key: end}

    assert read(None)[0] == ["hello", "wor"]  # a plain read shows the unfinished line
    first, offsets = read({})
    assert first == ["hello"]
    with open(out, "a") as f:
        f.write("ld\n")
    second, offsets = read(offsets)
    assert second == ["world"]
    monkeypatch.setattr(collect_reader, "STD_TAIL_BYTES", 16)
    with open(out, "a") as f:
        f.write("0123456789\n" * 3)  # more than the tail since the last read
    third, offsets = read(offsets)
    assert third == ["0123456789"]  # the tail, without the line it cuts
    assert read(offsets)[0] == []


def test_folds_made_per_file_merge_into_the_folds_of_all_lines():
    """What a node sends without --raw (each file folded, then merged) equals folding every
    line at once when each file's lines fall in the same windows; a fold that starts more than
    the window after another of its template stays apart."""
    from rankscope.logs.analysis import fold_partials, merge_folds

    files = [
        [_line(10.0 + r * 0.01, r, f"loss={v:.3f}"), _line(10.5 + r * 0.01, r, "slow", "WARNING")]
        for r, v in enumerate([0.52, 0.31, 0.4, 0.45])
    ]
    files[2].append(_line(30.0, 2, "loss=0.9"))
    files.append([LogLine(11.0, "loss=0.1", pid=55)])  # no rank: by pid
    expected = fold_lines(merge_lines(files))
    assert merge_folds([fold_partials(f) for f in files]) == expected
    assert [(f.text, f.ranks, f.pids, f.count) for f in expected] == [
        ("loss=0.1..0.520", (0, 1, 2, 3), (55,), 5),
        ("slow", (0, 1, 2, 3), (), 4),
        ("loss=0.9", (2,), (), 1),
    ]


def test_a_node_folds_its_files_as_the_cli_folds_their_lines(tmp_path, monkeypatch):
    """`read_node(fold=True)` (no --raw): the same folds, filters applied, from 3 files; foreign
    and half-written lines skipped as when reading lines."""
    import json

    from rankscope.logs.analysis import fold_partials, merge_folds
    from rankscope.logs.collect_reader import read_node

    monkeypatch.setenv("RANKSCOPE_LOG_DIR", str(tmp_path))
    (tmp_path / "job").mkdir()
    for rank in range(3):
        records = [
            {"time": 100.0 + (i // 6) * 10 + (i % 6) * 0.5 + rank * 0.01,  # windows 10 s apart
             "message": f"loss={i / (rank + 1):.3f} step {i}",
             "level": "WARNING" if i % 7 == 0 else "INFO", "pid": 7 + rank, "rank": rank}
            for i in range(40)
        ]  # fmt: skip
        text = "".join(json.dumps(r) + "\n" for r in records) + "not json\n" + '{"message"'
        (tmp_path / "job" / f"{7 + rank}.jsonl").write_text(text)
    for log_filter in (LogFilter(), LogFilter(frozenset({0, 2}), "WARNING", r"step [12]")):
        lines = read_node("job", {}, log_filter, 10**6, std_files=False)
        folded = read_node("job", {}, log_filter, 10**6, std_files=False, fold=True)
        assert folded.lines == () and folded.offsets == lines.offsets
        expected = fold_lines(merge_lines([lines.lines]))
        assert merge_folds([folded.folds]) == expected and expected
        assert merge_folds([fold_partials(merge_lines([lines.lines]))]) == expected


def test_a_folded_read_keeps_the_newest_folds_and_counts_the_lines_left_out(tmp_path, monkeypatch):
    """Messages that do not template well make a fold each: `read_node(fold=True)` keeps the
    newest `max_lines` folds, says how many lines it left out, and its folder stays bounded."""
    import json

    from rankscope.logs.analysis import Folder
    from rankscope.logs.collect_reader import read_node

    monkeypatch.setenv("RANKSCOPE_LOG_DIR", str(tmp_path))
    (tmp_path / "job").mkdir()
    records = [{"time": 100.0 + i * 0.01, "message": f"loss={i}", "rank": 0} for i in range(20)]
    records += [{"time": 200.0 + i, "message": "x" * (i + 1), "rank": 0} for i in range(40)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / "job" / "7.jsonl").write_text(text)
    folded = read_node("job", {}, LogFilter(), 10, std_files=False, fold=True)
    assert [f.first.message for f in folded.folds] == ["x" * n for n in range(31, 41)]
    assert folded.skipped == 20 + 30  # the loss fold's lines and the 30 older one-line folds
    folder = Folder(limit=10)
    for i in range(1000):
        folder.add(LogLine(float(i), "y" * (i + 1), rank=0))
        assert len(folder._done) + len(folder._open) <= 20
    assert sum(f.count for f in folder.partials()) + folder.dropped == 1000
