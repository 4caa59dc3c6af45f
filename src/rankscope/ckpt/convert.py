"""`ckpt convert`: HuggingFace Llama/Qwen2 <-> Megatron-core GPT, with tensor-parallel shards.

Streams tensor by tensor (peak memory about the largest tensor), writes into a temporary folder
and renames it into place at the end, so a failure leaves nothing behind and the input is never
touched. `verify=True` rebuilds every input tensor from the output and compares bytes.

Formats of Megatron-core output (`fmt`): `torch_dist` (default; what megatron-core's
`dist_checkpointing.load` reads: `metadata.json`, `common.pt`, `.metadata`, `.distcp`; see
`megatron.torch_dist_writer`), `legacy` (`mp_rank_NN[_PPP]/model_optim_rng.pt`) and `rankscope`
(`mp_rank_NN/model.safetensors`, rankscope's own). HuggingFace output is `OUT/model.safetensors`;
`config.json` is copied beside either. mcore-to-hf reads all three, and drops vocabulary padding.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rankscope.ckpt.expected import CONVERTS, dims_from_config, read_config
from rankscope.ckpt.mapping import Direction, Fuse, Step, TpSplit, plan
from rankscope.ckpt.model import ModelDims, TensorInfo
from rankscope.ckpt.sources import find_config, open_tensors
from rankscope.ckpt.tensor_source import TensorSource
from rankscope.errors import CheckpointError

if TYPE_CHECKING:
    import torch

    from rankscope.ckpt.megatron.torch_dist_writer import Progress

__all__ = ["FORMATS", "ConvertResult", "convert"]

FORMATS = ("torch_dist", "legacy", "rankscope")
"""Megatron-core output formats: megatron-core's distributed checkpoint, Megatron-LM's legacy
per-rank files, rankscope's own per-rank safetensors."""


@dataclass(frozen=True)
class ConvertResult:
    """What `convert` wrote."""

    direction: str
    output: str
    files: tuple[str, ...]
    tensors: int
    bytes: int
    tp_size: int
    verified: bool
    format: str = "rankscope"
    pp_size: int = 1
    padded_vocab: int | None = None


def convert(
    direction: str,
    input_path: str,
    output_path: str,
    *,
    model_type: str | None = None,
    tp: int = 1,
    pp: int = 1,
    fmt: str = "torch_dist",
    vocab_divisible_by: int = 128,
    force: bool = False,
    verify: bool = False,
    config_path: str | None = None,
    progress: Progress | None = None,
) -> ConvertResult:
    """Convert `input_path` into a new folder `output_path`.

    Example: `convert("hf-to-mcore", "llama-hf", "llama-mcore", model_type="llama", tp=2)`.
    """
    try:
        way = Direction(direction)
    except ValueError:
        raise CheckpointError(f"direction {direction!r}: use hf-to-mcore or mcore-to-hf") from None
    if model_type is not None and model_type not in CONVERTS:
        raise CheckpointError(
            f"--model-type {model_type!r}: rankscope converts {', '.join(CONVERTS)}"
        )
    if fmt not in FORMATS:
        raise CheckpointError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    for flag, value in (("--tp", tp), ("--pp", pp), ("--vocab-divisible-by", vocab_divisible_by)):
        if value < 1:
            raise CheckpointError(f"{flag} {value}: must be 1 or more")
    input_path, output_path = os.path.normpath(input_path), os.path.normpath(output_path)
    _check_paths(input_path, output_path, force)
    config_file = config_path or find_config(input_path)
    if config_file is None:
        raise CheckpointError(
            f"{input_path}: no config.json here; pass --config PATH to the HuggingFace config"
        )
    config = read_config(config_file)
    model_type = model_type or str(config["model_type"])
    if model_type not in CONVERTS:
        raise CheckpointError(
            f"{config_file}: model_type {model_type!r}: rankscope converts {', '.join(CONVERTS)}"
        )
    if config["model_type"] != model_type:
        raise CheckpointError(
            f"{config_file}: model_type is {config['model_type']!r}, not --model-type {model_type}"
        )
    dims = dims_from_config(config, path=config_file)
    sources = open_tensors(input_path)
    if way is Direction.HF_TO_MCORE and len(sources) > 1:
        raise CheckpointError(f"{input_path}: has mp_rank_NN/ folders: use mcore-to-hf")
    steps = plan(sources[0].names(), way, source=input_path)
    padded = None
    if dims.experts and way is Direction.HF_TO_MCORE and fmt != "torch_dist":
        raise CheckpointError(
            f"--format {fmt}: Mixture-of-Experts models are written as torch_dist"
        )
    if way is Direction.HF_TO_MCORE:
        if fmt == "rankscope":
            _check_tp(dims, tp, config_file)
        else:
            padded = _check_megatron(dims, tp, pp, vocab_divisible_by, config_file)
        entries = [_mcore_entries(s, sources[0], dims, tp, padded) for s in steps]
    else:
        tp, pp = len(sources), 1
        for src in sources[1:]:
            if sorted(src.names()) != sorted(sources[0].names()):
                raise CheckpointError(f"{src.path}: holds other tensors than {sources[0].path}")
        entries = [_hf_entries(s, sources, dims) for s in steps]

    _clean_orphans(output_path)
    tmp = f"{output_path}.rankscope-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        if way is Direction.HF_TO_MCORE and fmt != "rankscope":
            from rankscope.ckpt.megatron.megatron_writer import write_megatron

            files = write_megatron(
                fmt,
                tmp,
                steps,
                sources[0],
                dims,
                tp=tp,
                pp=pp,
                vocab_divisible_by=vocab_divisible_by,
                progress=progress,
            )
        else:
            files = _write(way, steps, entries, sources, dims, tp, tmp, model_type)
        shutil.copyfile(config_file, os.path.join(tmp, "config.json"))
        if verify:
            outputs = open_tensors(tmp)
            _verify(way, steps, sources, outputs, dims, len(outputs) if padded else tp)
        _move_into_place(tmp, output_path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    written = [os.path.join(output_path, os.path.relpath(f, tmp)) for f in files]
    return ConvertResult(
        direction=way.value,
        output=output_path,
        files=tuple(written),
        tensors=sum(len(e) for e in entries),
        bytes=sum(t.nbytes for e in entries for t in e)
        * (tp if way is Direction.HF_TO_MCORE and fmt == "rankscope" else 1),
        tp_size=tp,
        verified=verify,
        format=fmt if way is Direction.HF_TO_MCORE else "hf",
        pp_size=pp,
        padded_vocab=padded,
    )


def _check_paths(input_path: str, output_path: str, force: bool) -> None:
    if not os.path.exists(input_path):
        raise CheckpointError(f"{input_path}: no such file or directory")
    src, dst = os.path.realpath(input_path), os.path.realpath(output_path)
    if dst == src or dst.startswith(src + os.sep) or src.startswith(dst + os.sep):
        raise CheckpointError(f"{output_path}: the output must not overlap the input {input_path}")
    if os.path.exists(output_path) and not force:
        raise CheckpointError(f"{output_path}: exists; pass --force to replace it")
    parent = os.path.dirname(os.path.abspath(output_path))
    if not os.path.isdir(parent):
        raise CheckpointError(f"{output_path}: its folder {parent} does not exist")


def _check_tp(dims: ModelDims, tp: int, config_file: str) -> None:
    for what, value in (
        ("num_key_value_heads", dims.kv_heads),
        ("num_attention_heads", dims.heads),
        ("intermediate_size", dims.intermediate),
        ("vocab_size", dims.vocab),
    ):
        if value % tp:
            raise CheckpointError(f"{config_file}: {what} ({value}) must divide by --tp ({tp})")


def _dtype(step: Step, infos: list[TensorInfo], path: str) -> str:
    dtypes = {i.dtype for i in infos}
    if len(dtypes) != 1 or None in dtypes:
        raise CheckpointError(f"{path}: {', '.join(step.source)} have different dtypes {dtypes}")
    return str(dtypes.pop())


def _check_megatron(dims: ModelDims, tp: int, pp: int, divisible_by: int, config_file: str) -> int:
    """Megatron-core's own constraints; returns the padded vocabulary size."""
    from rankscope.ckpt.megatron.layout import padded_vocab

    for what, value in (
        ("num_attention_heads", dims.heads),
        ("intermediate_size", dims.intermediate),
    ):
        if value % tp:
            raise CheckpointError(f"{config_file}: {what} ({value}) must divide by --tp ({tp})")
    if dims.kv_heads % tp and tp % dims.kv_heads:
        raise CheckpointError(
            f"{config_file}: num_key_value_heads ({dims.kv_heads}) and --tp ({tp}): one must "
            "divide the other (Megatron-core gives each rank whole key-value groups, or, with "
            "fewer KV heads than ranks, tp / kv_heads ranks per group)"
        )
    if pp > dims.num_layers:
        raise CheckpointError(f"--pp {pp}: more stages than the {dims.num_layers} layers")
    return padded_vocab(dims.vocab, divisible_by, tp)


def _mcore_entries(
    step: Step, source: TensorSource, dims: ModelDims, tp: int, padded: int | None = None
) -> list[TensorInfo]:
    """The one tensor a step writes to each rank: name, shape of one piece, dtype."""
    from rankscope.ckpt.tensors import split_sizes

    infos = [source.infos[n] for n in step.source]
    dtype = _dtype(step, infos, source.path)
    if step.rule.fuse is Fuse.QKV:
        want = [
            dims.heads * dims.head_dim,
            dims.kv_heads * dims.head_dim,
            dims.kv_heads * dims.head_dim,
        ]
        got = [i.shape[0] if i.shape else -1 for i in infos]
        if got != want:
            raise CheckpointError(
                f"{source.path}: {', '.join(step.source)} have {got} rows; the config "
                f"(heads {dims.heads}, kv heads {dims.kv_heads}, head_dim {dims.head_dim}) "
                f"implies {want}"
            )
    shape = infos[0].shape
    if step.rule.fuse is not Fuse.COPY:
        shape = (sum(i.shape[0] for i in infos), *shape[1:])
    if padded is not None:  # Megatron's own formats: checked here, written elsewhere
        if _is_vocab(step) and shape:
            shape = (padded, *shape[1:])
        return [TensorInfo(step.target[0], shape, dtype)]
    if step.rule.tp is not TpSplit.REPLICATED and tp > 1:
        dim = 1 if step.rule.tp is TpSplit.ROW else 0
        size = shape[dim] // 2 if step.rule.tp is TpSplit.GATE_UP else shape[dim]
        if len(shape) <= dim or size % tp:
            raise CheckpointError(
                f"{source.path}: {step.source[0]} {list(shape)} does not split in {tp} along "
                f"dim {dim}"
            )
    return [TensorInfo(step.target[0], split_sizes(shape, step.rule.tp, tp), dtype)]


def _hf_entries(step: Step, sources: list[TensorSource], dims: ModelDims) -> list[TensorInfo]:
    infos = [s.infos[step.source[0]] for s in sources]
    dtype = _dtype(step, infos, sources[0].path)
    shape = infos[0].shape
    tp = len(sources)
    if step.rule.tp is not TpSplit.REPLICATED:
        dim = 1 if step.rule.tp is TpSplit.ROW else 0
        shape = (*shape[:dim], shape[dim] * tp, *shape[dim + 1 :])
    if _is_vocab(step) and shape and shape[0] > dims.vocab:  # Megatron's vocabulary padding
        shape = (dims.vocab, *shape[1:])
    rest = shape[1:]
    if step.rule.fuse is Fuse.QKV:
        q, kv = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
        if shape[0] != q + 2 * kv:
            raise CheckpointError(
                f"{sources[0].path}: {step.source[0]} has {shape[0]} rows over {tp} ranks; "
                f"the config implies {q + 2 * kv}"
            )
        shapes = [(q, *rest), (kv, *rest), (kv, *rest)]
    elif step.rule.fuse is Fuse.GATE_UP:
        shapes = [(shape[0] // 2, *rest)] * 2
    else:
        shapes = [shape]
    return [TensorInfo(n, s, dtype) for n, s in zip(step.target, shapes, strict=True)]


def _write(
    way: Direction,
    steps: list[Step],
    entries: list[list[TensorInfo]],
    sources: list[TensorSource],
    dims: ModelDims,
    tp: int,
    tmp: str,
    model_type: str,
) -> list[str]:
    from rankscope.ckpt.safetensors_writer import SafetensorsWriter
    from rankscope.ckpt.tensors import fuse, split_fused, split_tp

    flat = [t for e in entries for t in e]
    if way is Direction.HF_TO_MCORE:
        paths = []
        for rank in range(tp):
            os.makedirs(os.path.join(tmp, f"mp_rank_{rank:02d}"))
            paths.append(os.path.join(tmp, f"mp_rank_{rank:02d}", "model.safetensors"))
        meta = {"format": "pt", "rankscope.scheme": "mcore-gpt", "rankscope.model_type": model_type}
        with contextlib.ExitStack() as stack:
            writers = [
                stack.enter_context(
                    SafetensorsWriter(
                        p,
                        flat,
                        metadata={
                            **meta,
                            "rankscope.tp_rank": str(r),
                            "rankscope.tp_size": str(tp),
                        },
                    )
                )
                for r, p in enumerate(paths)
            ]
            for step in steps:
                fused = fuse([sources[0].get(n) for n in step.source], step.rule.fuse, dims)
                for writer, piece in zip(writers, split_tp(fused, step.rule.tp, tp), strict=True):
                    writer.write(step.target[0], piece)
        return paths
    path = os.path.join(tmp, "model.safetensors")
    with SafetensorsWriter(path, flat, metadata={"format": "pt"}) as writer:
        for step in steps:
            whole = _trim(step, _merged(step, sources), dims)
            parts = split_fused(whole, step.rule.fuse, dims)
            for name, tensor in zip(step.target, parts, strict=True):
                writer.write(name, tensor)
    return [path]


def _merged(step: Step, sources: list[TensorSource]) -> torch.Tensor:
    from rankscope.ckpt.tensors import merge_tp

    pieces = [s.get(step.source[0]) for s in sources]
    try:
        return merge_tp(pieces, step.rule.tp)
    except ValueError as exc:
        raise CheckpointError(f"{sources[0].path}: {step.source[0]}: {exc}") from None


def _verify(
    way: Direction,
    steps: list[Step],
    inputs: list[TensorSource],
    outputs: list[TensorSource],
    dims: ModelDims,
    tp: int,
) -> None:
    """Rebuild every input tensor from the output and compare bytes."""
    from rankscope.ckpt.tensors import fuse, merge_tp, same_bytes, split_fused, split_tp

    for step in steps:
        if way is Direction.HF_TO_MCORE:
            merged = merge_tp([o.get(step.target[0]) for o in outputs], step.rule.tp)
            merged = _trim(step, merged, dims)
            rebuilt = dict(zip(step.source, split_fused(merged, step.rule.fuse, dims), strict=True))
            pairs = [(rebuilt[n], inputs[0].get(n), n) for n in step.source]
        elif _is_vocab(step):
            fused = fuse([outputs[0].get(n) for n in step.target], step.rule.fuse, dims)
            pairs = [(fused, _trim(step, _merged(step, inputs), dims), step.source[0])]
        else:
            fused = fuse([outputs[0].get(n) for n in step.target], step.rule.fuse, dims)
            pieces = split_tp(fused, step.rule.tp, tp)
            pairs = [
                (p, i.get(step.source[0]), step.source[0])
                for p, i in zip(pieces, inputs, strict=True)
            ]
        for got, want, name in pairs:
            if not same_bytes(got, want):
                raise CheckpointError(
                    f"{outputs[0].path}: --verify: {name} does not round-trip bit-exactly; "
                    "nothing was written (please report this)"
                )


def _clean_orphans(output: str) -> None:
    """Remove `<output>.rankscope-tmp-<pid>` / `-old-<pid>` folders of conversions that died."""
    import glob

    for path in glob.glob(glob.escape(output) + ".rankscope-[to][ml][pd]-*"):
        pid = path.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_vocab(step: Step) -> bool:
    return step.rule.mcore in ("embedding.word_embeddings.weight", "output_layer.weight")


def _trim(step: Step, tensor: torch.Tensor, dims: ModelDims) -> torch.Tensor:
    """Drop Megatron's vocabulary padding rows (past the config's vocab_size)."""
    if _is_vocab(step) and tensor.shape[0] > dims.vocab:
        return tensor[: dims.vocab].contiguous()
    return tensor


def _move_into_place(tmp: str, output: str) -> None:
    if os.path.exists(output):
        old = f"{output}.rankscope-old-{os.getpid()}"
        os.replace(output, old)
        os.replace(tmp, output)
        if os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.unlink(old)
    else:
        os.replace(tmp, output)
