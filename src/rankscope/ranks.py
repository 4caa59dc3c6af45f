"""Rank specs: parse `0,3-5` and print sets of ranks back in the same compact form."""

from __future__ import annotations

from collections.abc import Iterable

from rankscope.errors import BadRankSpec


def parse_rank_spec(spec: str) -> frozenset[int]:
    """`"0,3-5"` -> {0, 3, 4, 5}. Raises BadRankSpec with the offending part.

    Example: `parse_rank_spec("0-2,7") == frozenset({0, 1, 2, 7})`.
    """
    ranks: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise BadRankSpec(
                f"--ranks {spec!r}: {part!r} is not a rank or a range; "
                "use non-negative integers like 0,3-5"
            )
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise BadRankSpec(
                f"--ranks {spec!r}: range {part!r} runs backwards; write {last}-{first}"
            )
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def format_ranks(ranks: Iterable[int]) -> str:
    """{0, 1, 2, 4, 5, 6, 7} -> `"0-2,4-7"`; a run of two stays a list: {0, 1} -> `"0,1"`."""
    ordered = sorted(set(ranks))
    runs: list[str] = []
    start = prev = None
    for r in ordered:
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            runs.append(_run(start, prev))
        start = prev = r
    if start is not None:
        runs.append(_run(start, prev))
    return ",".join(runs)


def _run(start: int, end: int | None) -> str:
    if end is None or end == start:
        return str(start)
    return f"{start},{end}" if end == start + 1 else f"{start}-{end}"
