"""Numbers for people: bytes, durations and ages as every command prints them."""

from __future__ import annotations

__all__ = ["ago", "human_bytes", "human_count", "human_seconds", "percent"]


def human_bytes(n: float) -> str:
    """`1.5 GiB` style; negative numbers keep their sign.

    Example: `human_bytes(3 * 2**30)` is `'3.0 GiB'`.
    """
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} TiB"  # pragma: no cover


def human_count(n: int) -> str:
    """`6.7B`, `124.4M`, `12.3K`."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return str(n)


def human_seconds(s: float) -> str:
    """A time span to wait for: `90s`, `12 min`, `3.5 h`, `2.1 days`."""
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def ago(now: float, then: float) -> str:
    """Seconds as a short duration: `0.4s`, `12s`, `3m05s`, `2h01m`."""
    s = max(0.0, now - then)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def percent(part: float, whole: float) -> str:
    """`part` as a whole percentage of `whole`: `percent(3, 4)` is `'75%'`."""
    return f"{100.0 * part / whole:.0f}%"
