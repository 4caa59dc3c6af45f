"""Checkpoint inspections, diffs and conversions as a terminal shows them."""

from __future__ import annotations

import re

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.ckpt.convert import ConvertResult
from rankscope.ckpt.model import CkptDiff, Inspection
from rankscope.units import human_bytes, human_count

__all__ = ["render_convert", "render_diff", "render_inspection"]

LISTED = 10
"""Keys listed per section of a diff before `... N more`."""

_LAYER_NUM = re.compile(r"(?<=layers\.)\d+(?=\.)")


def render_inspection(result: Inspection) -> list[RenderableType]:
    scheme = result.scheme
    lines = [
        Text(f"{result.source} ({result.kind.value}, {result.files} files)", style="bold"),
        Text(
            f"{result.tensor_count} tensors, {human_count(result.total_params)} parameters, "
            f"{human_bytes(result.total_bytes)}; dtypes: "
            + ", ".join(f"{d} {human_count(n)}" for d, n in result.dtype_params.items())
        ),
        Text(f"naming scheme: {scheme.label}"),
    ]
    if scheme.layer_count:
        lines.append(
            Text(f"layers: {scheme.layer_count} ({scheme.first_layer}-{scheme.last_layer})")
        )
    if scheme.tied_embeddings is not None:
        lines.append(Text(f"tied embeddings: {'yes' if scheme.tied_embeddings else 'no'}"))
    lines.extend(Text(note) for note in result.notes)
    if result.tensor_parallel:
        tp = result.tensor_parallel
        lines.append(Text(f"tensor parallel: size {tp.tp_size} ({tp.reason})", style="yellow"))
    table = Table(title="tensors (layers folded)", title_justify="left")
    for column, justify in (("name", "left"), ("shape", "left"), ("dtype", "left"), ("x", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    folded: dict[tuple[str, tuple[int, ...], str], list[int]] = {}
    for t in result.tensors:
        m = _LAYER_NUM.search(t.name)
        key = (_LAYER_NUM.sub("N", t.name), t.shape, t.dtype or "?")
        folded.setdefault(key, []).append(int(m.group(0)) if m else -1)
    for (name, shape, dtype), layers in folded.items():
        table.add_row(name, str(list(shape)), dtype, str(len(layers)))
    return [*lines, table]


def render_diff(result: CkptDiff) -> list[RenderableType]:
    verdict = (
        Text("MATCH", style="bold green") if result.matches else Text("MISMATCH", style="bold red")
    )
    head = Text()
    head.append_text(verdict)
    head.append(
        f"  EXPECTED {result.expected} ({result.expected_scheme.label})\n"
        f"          ACTUAL {result.actual} ({result.actual_scheme.label})\n"
        f"{result.matched} tensors match by name; {len(result.missing)} missing, "
        f"{len(result.unexpected)} unexpected, {len(result.shape_mismatches)} shape and "
        f"{len(result.dtype_mismatches)} dtype mismatches"
    )
    parts: list[RenderableType] = [head]
    if result.explanations:
        parts.append(Text("\nwhy:", style="bold"))
    for ex in result.explanations:
        line = Text(f"- [{ex.kind.value}] ", style="bold cyan")
        line.append(ex.message, style="")
        parts.append(line)
        if ex.fix:
            parts.append(Text(f"    fix: {ex.fix}", style="green"))
    for title, keys in (("missing", result.missing), ("unexpected", result.unexpected)):
        if keys:
            parts.append(Text(f"\n{title} ({len(keys)}):", style="bold"))
            parts.extend(Text(f"  {k}") for k in keys[:LISTED])
            if len(keys) > LISTED:
                parts.append(Text(f"  ... {len(keys) - LISTED} more", style="dim"))
    if result.shape_mismatches:
        table = Table(title="shape mismatches", title_justify="left")
        for column in ("name", "expected", "actual"):
            table.add_column(column)
        for m in result.shape_mismatches[:LISTED]:
            table.add_row(m.name, str(list(m.expected)), str(list(m.actual)))
        parts.append(table)
    if result.dtype_mismatches:
        table = Table(title="dtype mismatches", title_justify="left")
        for column in ("name", "expected", "actual"):
            table.add_column(column)
        for d in result.dtype_mismatches[:LISTED]:
            table.add_row(d.name, d.expected, d.actual)
        parts.append(table)
    return parts


def render_convert(result: ConvertResult) -> list[RenderableType]:
    check = ", round trip verified bit-exact" if result.verified else ""
    lines: list[RenderableType] = [
        Text(
            f"{result.direction}: wrote {result.tensors} tensors "
            f"({human_bytes(result.bytes)}) in {len(result.files)} files, "
            f"format {result.format}, tensor parallel {result.tp_size}"
            + (f", pipeline {result.pp_size}" if result.pp_size > 1 else "")
            + (f", vocabulary padded to {result.padded_vocab}" if result.padded_vocab else "")
            + check,
            style="bold",
        )
    ]
    lines.extend(Text(f"  {f}") for f in result.files)
    return lines
