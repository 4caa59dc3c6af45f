"""Reading log files on one node: rankscope's JSON Lines and Ray's worker .out/.err.

`read_node` runs in a Ray task pinned to the node (`read_node_remote`), so it reads the files of
processes that died as well as live ones. Filters are applied there, and at most `max_lines`
lines or folds (the newest) come back, with how many lines were left out (`skipped`). Ray's
.out/.err lines carry no time: each gets its file's last modification time, in file order, and
the rank of the pid the file belongs to.

`rankscope logs --follow` passes `offsets` (where each file, by device and inode, was read up
to) and gets them back advanced: each read returns only the complete lines written since, so a
follow costs what was written, not the size of the files, and a rotated file (renamed: same
inode) is read on from where it was.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
from sys import intern
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.logs.analysis import Folder, LogFilter, fold_partials, newest_folds
from rankscope.logs.io_paths import ROTATE_KEEP, job_log_dir, rotated, worker_std_files
from rankscope.logs.model import LogLine, NodeLogs, PartialFold

__all__ = ["parse_jsonl_line", "read_node", "read_node_remote"]

STD_TAIL_BYTES = 4 << 20
"""How much of the end of each Ray .out/.err file is read."""
_NO_EXTRA: dict[str, Any] = {}
_RAY_MARKER = re.compile(r"^:(actor_name|task_name|job_id|task_attempt_start|task_attempt_end):")


def parse_jsonl_line(raw: str, seq: int) -> LogLine | None:
    """One line of a rankscope log file; None for a line that is not ours (or cut short)."""
    try:
        doc: dict[str, Any] = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "message" not in doc:
        return None
    return line_of(doc, seq)


def line_of(doc: dict[str, Any], seq: int) -> LogLine:
    """The `LogLine` of one parsed record of a rankscope log file."""
    rank = doc.get("rank")
    role, group = doc.get("role"), doc.get("group")
    return LogLine(  # repeated strings interned: one copy each when pickled to the CLI
        time=float(doc.get("time") or 0.0),
        message=str(doc["message"]),
        level=intern(str(doc.get("level") or "INFO")),
        rank=rank if isinstance(rank, int) else None,
        pid=int(doc.get("pid") or 0),
        node=intern(str(doc.get("node") or "")),
        role=intern(role) if isinstance(role, str) else None,
        group=intern(group) if isinstance(group, str) else None,
        logger=intern(str(doc.get("logger") or "")),
        step=int(doc.get("step") or 0),
        exc=str(doc.get("exc") or ""),
        extra=doc.get("extra") or _NO_EXTRA,
        source="log",
        seq=seq,
    )


def read_node(
    job_id: str,
    pids: dict[int, int | None],
    log_filter: LogFilter,
    max_lines: int,
    *,
    std_files: bool = True,
    offsets: dict[str, int] | None = None,
    fold: bool = False,
) -> NodeLogs:
    """Every rankscope log file of the job on this node, and Ray's .out/.err of `pids`
    (pid -> rank); filtered, the newest `max_lines` lines (or folds) kept, the lines of the
    rest counted in `skipped`. With `offsets` (file key -> bytes read, from the last call's
    `NodeLogs.offsets`), only complete lines past them. With `fold`, each file's lines are
    folded here (`NodeLogs.folds`, no `lines`): the CLI then gets a few folds instead of every
    line (`rankscope logs` without `--raw`)."""
    pattern = log_filter.pattern()
    ends: dict[str, int] = {}
    lines: list[LogLine] = []
    folds: list[PartialFold] = []
    files: list[str] = []
    errors: list[str] = []
    skipped = 0
    hostname = socket.gethostname()
    directory = job_log_dir(job_id)
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        folder = Folder(limit=max_lines) if fold else None  # per file: lines in time order
        for part in [rotated(path, n) for n in range(ROTATE_KEEP, 0, -1)] + [path]:
            if not os.path.exists(part):
                continue
            files.append(part)
            try:
                with open(part, "rb") as f:
                    key = _file_key(f)
                    pos = (offsets or {}).get(key, 0)
                    f.seek(pos if pos <= os.fstat(f.fileno()).st_size else 0)  # else truncated
                    pos = f.tell()
                    if folder is not None:
                        ends[key] = _fold_jsonl(f, pos, folder, log_filter, pattern)
                        continue
                    for raw in f:
                        if not raw.endswith(b"\n"):
                            break  # being written: read it whole next time
                        text = raw.decode("utf-8", "replace")  # as fast as a text file
                        line = parse_jsonl_line(text, pos)  # seq: where it starts, in order
                        pos += len(raw)
                        if line is not None and log_filter.keeps(line, pattern):
                            lines.append(line)
                    ends[key] = pos
            except OSError as exc:
                errors.append(f"{part}: {exc.strerror or exc}")
        if folder is not None:
            folds += folder.partials()
            skipped += folder.dropped
            if len(folds) > 2 * max_lines:
                folds, dropped = newest_folds(folds, max_lines)
                skipped += dropped
    if std_files:
        for pid, rank in sorted(pids.items()):
            for path, source in worker_std_files(pid):
                files.append(path)
                try:
                    found, (key, end) = _std_lines(
                        path, source, pid, rank, hostname, log_filter, pattern, offsets
                    )
                    ends[key] = end
                except OSError as exc:
                    errors.append(f"{path}: {exc.strerror or exc}")
                    continue
                if fold:
                    folds, dropped = newest_folds(folds + fold_partials(found), max_lines)
                    skipped += dropped
                else:
                    lines += found
    folds, dropped = newest_folds(folds, max_lines)
    skipped += dropped
    if len(lines) > max_lines:
        lines.sort(key=lambda ln: (ln.time, ln.pid, ln.seq))
        skipped = len(lines) - max_lines
        lines = lines[skipped:]
    return NodeLogs(
        hostname, tuple(lines), tuple(files), skipped, tuple(errors), ends, tuple(folds)
    )


def _fold_jsonl(
    f: Any, pos: int, folder: Folder, log_filter: LogFilter, pattern: re.Pattern[str] | None
) -> int:
    """Fold the complete lines of `f` from `pos` into `folder`; returns the offset read up to.
    Builds a `LogLine` only for a line that starts a fold."""
    keeps = log_filter.keeps_fields
    add = folder.add_fields
    for raw in f:
        if not raw.endswith(b"\n"):
            break  # being written
        seq = pos
        pos += len(raw)
        try:
            doc = json.loads(raw.decode("utf-8", "replace"))
            message = str(doc["message"])
            rank = doc.get("rank")
            if not isinstance(rank, int):
                rank = None
            when = float(doc.get("time") or 0.0)
            level = str(doc.get("level") or "INFO")
        except (ValueError, TypeError, KeyError):
            continue  # not ours, or cut short
        if keeps(rank, when, level, "log", message, pattern):
            add(when, message, level, "log", rank, int(doc.get("pid") or 0), _maker(doc, seq))
    return pos


def _maker(doc: dict[str, Any], seq: int) -> Any:
    return lambda: line_of(doc, seq)


def _file_key(f: Any) -> str:
    """The same file under any name (rotation renames it): its device and inode."""
    st = os.fstat(f.fileno())
    return f"{st.st_dev}:{st.st_ino}"


def _std_lines(
    path: str,
    source: str,
    pid: int,
    rank: int | None,
    hostname: str,
    log_filter: LogFilter,
    pattern: re.Pattern[str] | None,
    offsets: dict[str, int] | None,
) -> tuple[list[LogLine], tuple[str, int]]:
    """The lines of the file's tail (past its offset when following), and (its key, the
    offset read up to). Following, a line still being written waits for the next read."""
    with open(path, "rb") as f:
        key = _file_key(f)
        st = os.fstat(f.fileno())
        size, mtime = st.st_size, st.st_mtime
        start = max(0, size - STD_TAIL_BYTES)
        known = (offsets or {}).get(key)
        if known is not None and start <= known <= size:
            start = known
        f.seek(start)
        data = f.read(size - start)
    cut = start > 0 and (known is None or start != known)  # in the middle of a line
    if offsets is not None:
        data = data[: data.rfind(b"\n") + 1]
    found = []
    pos = start
    for raw in data.splitlines(keepends=True):
        seq, pos = pos, pos + len(raw)
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if cut:
            cut = False
            continue
        if not text.strip() or _RAY_MARKER.match(text):
            continue
        line = LogLine(
            time=mtime,
            message=text,
            level="",
            rank=rank,
            pid=pid,
            node=hostname,
            source=source,
            seq=seq,
        )
        if log_filter.keeps(line, pattern):
            found.append(line)
    return found, (key, start + len(data))


@ray.remote(num_cpus=0, max_retries=0)
def _read_on_node(
    job_id: str,
    pids: dict[int, int | None],
    log_filter: LogFilter,
    max_lines: int,
    how: tuple[bool, bool],
    offsets: dict[str, int] | None,
) -> NodeLogs:
    """`how`: (read Ray's .out/.err, fold on the node)."""
    std, fold = how
    return read_node(job_id, pids, log_filter, max_lines, std_files=std, offsets=offsets, fold=fold)


def read_node_remote(
    node_id: str,
    job_id: str,
    pids: dict[int, int | None],
    log_filter: LogFilter,
    max_lines: int,
    std_files: bool = True,
    offsets: dict[str, int] | None = None,
    fold: bool = False,
) -> Any:
    """The `read_node` task on `node_id` (an ObjectRef)."""
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return _read_on_node.options(scheduling_strategy=strategy).remote(
        job_id, pids, log_filter, max_lines, (std_files, fold), offsets
    )
