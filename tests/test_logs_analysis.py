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
from rankscope.logs.model import LogLine
from rankscope.logs.reader import parse_jsonl_line
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


def test_follow_knows_a_line_again_on_the_next_read():
    from rankscope.logs.follow import line_key

    logged = _line(5.0, 1, "loss=0.5")
    assert line_key(logged) == line_key(_line(5.0, 1, "loss=0.5"))
    printed = LogLine(time=9.0, message="hello", level="", rank=1, pid=7, source="stdout", seq=3)
    later = LogLine(time=12.0, message="hello", level="", rank=1, pid=7, source="stdout", seq=3)
    assert line_key(printed) == line_key(later)  # .out lines take the file's mtime
