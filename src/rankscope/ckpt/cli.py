"""`rankscope ckpt inspect | diff | convert`: checkpoints without loading tensors.

Exit codes: 0 all well, 1 the checkpoints do not match (diff), 2 bad input. torch and
transformers are imported only inside commands, so `rankscope --help` stays fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated

import typer
from rich.console import Console, RenderableType
from rich.text import Text

from rankscope.cli.common import ExitCode, Json, handle_errors, out

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.command()
@handle_errors
def inspect(
    path: Annotated[str, typer.Argument(help="A .safetensors/.bin/.pt file, a folder, or *.json.")],
    as_json: Json = False,
) -> None:
    """Tensors, shapes, dtypes, parameters, naming scheme, layers, tied embeddings, TP."""
    from rankscope.ckpt.api import inspect as inspect_path
    from rankscope.ckpt.render import render_inspection
    from rankscope.cli.output import to_json

    result = inspect_path(path)
    if as_json:
        out.print_json(to_json("ckpt.inspect", result))
    else:
        _print(render_inspection(result))


@app.command()
@handle_errors
def diff(
    expected: Annotated[str, typer.Argument(help="What the model wants: a config.json or ckpt.")],
    actual: Annotated[str, typer.Argument(help="The checkpoint to check.")],
    as_json: Json = False,
) -> None:
    """Missing, unexpected and mismatched tensors, and why. Exit 1 when they differ."""
    from rankscope.ckpt.api import diff as diff_paths
    from rankscope.ckpt.render import render_diff
    from rankscope.cli.output import to_json

    result = diff_paths(expected, actual)
    if as_json:
        out.print_json(to_json("ckpt.diff", result))
    else:
        _print(render_diff(result))
    if not result.matches:
        raise typer.Exit(ExitCode.FINDING)


@app.command()
@handle_errors
def convert(
    direction: Annotated[str, typer.Argument(help="hf-to-mcore or mcore-to-hf.")],
    src: Annotated[str | None, typer.Argument(help="Checkpoint folder to read.")] = None,
    dst: Annotated[str | None, typer.Argument(help="New folder to write.")] = None,
    input_path: Annotated[
        str | None, typer.Option("--input", help="Same as SRC.", hidden=True)
    ] = None,
    output_path: Annotated[
        str | None, typer.Option("--output", help="Same as DST.", hidden=True)
    ] = None,
    model_type: Annotated[
        str | None, typer.Option("--model-type", help="llama or qwen2 (default: config.json's).")
    ] = None,
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel size to write for.")] = 1,
    pp: Annotated[
        int, typer.Option("--pp", min=1, help="Pipeline stages (legacy: one per folder).")
    ] = 1,
    fmt: Annotated[
        str, typer.Option("--format", help="torch_dist (Megatron-core), legacy or rankscope.")
    ] = "torch_dist",
    vocab_divisible_by: Annotated[
        int,
        typer.Option(
            "--vocab-divisible-by", min=1, help="Megatron's make_vocab_size_divisible_by."
        ),
    ] = 128,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output.")] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the round trip is bit-exact.")
    ] = False,
    config: Annotated[
        str | None, typer.Option("--config", help="config.json, if not in the input folder.")
    ] = None,
    as_json: Json = False,
) -> None:
    """HuggingFace Llama/Qwen2 <-> Megatron-core GPT, streamed, in the format Megatron loads."""
    from rankscope.ckpt.convert import convert as run_convert
    from rankscope.ckpt.render import render_convert
    from rankscope.cli.output import to_json
    from rankscope.errors import UserError

    source, target = src or input_path, dst or output_path
    if source is None or target is None:
        raise UserError("convert needs SRC and DST: rankscope ckpt convert hf-to-mcore SRC DST")
    with _progress(quiet=as_json) as progress:
        result = run_convert(
            direction,
            source,
            target,
            model_type=model_type,
            tp=tp,
            pp=pp,
            fmt=fmt,
            vocab_divisible_by=vocab_divisible_by,
            force=force,
            verify=verify,
            config_path=config,
            progress=progress,
        )
    if as_json:
        out.print_json(to_json("ckpt.convert", result))
    else:
        _print(render_convert(result))


@contextlib.contextmanager
def _progress(*, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr for checkpoints over 1 GB written from a terminal."""
    import sys

    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("writing", total=None)

        def update(done: int, total: int) -> None:
            if total >= 1 << 30:
                bar.update(task, completed=done, total=total)

        yield update


def _print(parts: list[RenderableType]) -> None:
    """Text lines are never wrapped or cropped (paths and commands stay copyable)."""
    for part in parts:
        out.print(part, soft_wrap=isinstance(part, Text))
