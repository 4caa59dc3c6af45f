"""`rankscope ckpt inspect | diff | convert`: checkpoints without loading tensors.

Exit codes: 0 all well, 1 the checkpoints do not match (diff), 2 bad input. torch and
transformers are imported only inside commands, so `rankscope --help` stays fast.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rankscope.ckpt.analysis import CkptDiff, Inspection
    from rankscope.ckpt.convert import ConvertResult

app = typer.Typer(no_args_is_help=True, add_completion=False)
out = Console(highlight=False, soft_wrap=False)

F = TypeVar("F", bound=Callable[..., Any])
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
LISTED = 10
"""Keys listed per section of a diff before `... N more`."""


def _user_errors(fn: F) -> F:
    """`user_errors_exit_2` from main, imported at call time (main imports this module)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rankscope.cli.main import user_errors_exit_2

        return user_errors_exit_2(fn)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@app.command()
@_user_errors
def inspect(
    path: Annotated[str, typer.Argument(help="A .safetensors/.bin/.pt file, a folder, or *.json.")],
    as_json: Json = False,
) -> None:
    """Tensors, shapes, dtypes, parameters, naming scheme, layers, tied embeddings, TP."""
    from rankscope.ckpt.api import inspect as inspect_path
    from rankscope.cli.render import to_json

    result = inspect_path(path)
    if as_json:
        out.print_json(to_json("ckpt.inspect", result))
    else:
        _print(render_inspection(result))


@app.command()
@_user_errors
def diff(
    expected: Annotated[str, typer.Argument(help="What the model wants: a config.json or ckpt.")],
    actual: Annotated[str, typer.Argument(help="The checkpoint to check.")],
    as_json: Json = False,
) -> None:
    """Missing, unexpected and mismatched tensors, and why. Exit 1 when they differ."""
    from rankscope.ckpt.api import diff as diff_paths
    from rankscope.cli.render import to_json

    result = diff_paths(expected, actual)
    if as_json:
        out.print_json(to_json("ckpt.diff", _diff_json(result)))
    else:
        _print(render_diff(result))
    if not result.matches:
        raise typer.Exit(1)


@app.command()
@_user_errors
def convert(
    direction: Annotated[str, typer.Argument(help="hf-to-mcore or mcore-to-hf.")],
    input_path: Annotated[str, typer.Option("--input", help="Checkpoint folder to read.")],
    output_path: Annotated[str, typer.Option("--output", help="New folder to write.")],
    model_type: Annotated[str, typer.Option("--model-type", help="llama or qwen2.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel shards to write.")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output.")] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the round trip is bit-exact.")
    ] = False,
    config: Annotated[
        str | None, typer.Option("--config", help="config.json, if not in the input folder.")
    ] = None,
    as_json: Json = False,
) -> None:
    """HuggingFace Llama/Qwen2 <-> Megatron-core GPT, streamed tensor by tensor."""
    from rankscope.ckpt.convert import convert as run_convert
    from rankscope.cli.render import to_json

    result = run_convert(
        direction,
        input_path,
        output_path,
        model_type=model_type,
        tp=tp,
        force=force,
        verify=verify,
        config_path=config,
    )
    if as_json:
        out.print_json(to_json("ckpt.convert", result))
    else:
        _print(render_convert(result))


# ------------------------------------------------------------------ render
def _print(parts: list[RenderableType]) -> None:
    """Text lines are never wrapped or cropped (paths and commands stay copyable)."""
    for part in parts:
        out.print(part, soft_wrap=isinstance(part, Text))


def human_bytes(n: int) -> str:
    """`1.5 GiB` style."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def human_count(n: int) -> str:
    """`6.7B`, `124.4M`, `12.3K`."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return str(n)


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


def _diff_json(result: CkptDiff) -> dict[str, Any]:
    from rankscope.serialize import plain

    data: dict[str, Any] = plain(result)
    data["matches"] = result.matches
    return data


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
            f"tensor parallel {result.tp_size}{check}",
            style="bold",
        )
    ]
    lines.extend(Text(f"  {f}") for f in result.files)
    return lines
