"""Explain why two checkpoints do not match: the `_Explainer` and its helpers.

Pure: two manifests and their naming schemes in, `Explanation`s out. Each names the cause (naming
scheme, wrapper prefix, tensor-parallel shard, fused vs split tensors, layer count, tied
embeddings, renamed or dropped tensors) and, where there is one, the fix.

Example: `explain(expected, actual, e_scheme, a_scheme)[0].fix`.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict

from rankscope.ckpt.mapping import Direction, mcore_infos, translate
from rankscope.ckpt.model import Explanation, ExplanationKind, Manifest, TensorInfo
from rankscope.ckpt.schemes import Scheme, SchemeInfo, Wrapper, strip_wrappers

__all__ = ["explain"]

EXAMPLES = 3
"""Keys quoted per explanation."""


def explain(
    expected: Manifest, actual: Manifest, e_scheme: SchemeInfo, a_scheme: SchemeInfo
) -> list[Explanation]:
    """Why `actual` does not match `expected`, one `Explanation` per cause, in the order found."""
    return _Explainer(expected, actual, e_scheme, a_scheme).run()


class _Explainer:
    """Normalizes names step by step, recording why each step was needed."""

    def __init__(self, expected: Manifest, actual: Manifest, e: SchemeInfo, a: SchemeInfo):
        self.e_manifest, self.a_manifest = expected, actual
        self.e_scheme, self.a_scheme = e, a
        self.expected = dict(expected.tensors)
        self.actual = dict(actual.tensors)
        self.out: list[Explanation] = []
        self.shapes_known = True

    def add(self, kind: ExplanationKind, message: str, fix: str | None, keys: list[str]) -> None:
        self.out.append(Explanation(kind, message, fix, len(keys), tuple(keys[:EXAMPLES])))

    def run(self) -> list[Explanation]:
        self._wrappers()
        self._prefix()
        self._naming_scheme()
        self._layers()
        self._tied()
        self._fused_split()
        self._shapes()
        self._renamed_and_dropped()
        self._dtypes()
        return self.out

    def _missing(self) -> list[str]:
        return sorted(set(self.expected) - set(self.actual))

    def _unexpected(self) -> list[str]:
        return sorted(set(self.actual) - set(self.expected))

    def _wrappers(self) -> None:
        extra = [w for w in self.a_scheme.wrappers if w not in self.e_scheme.wrappers]
        lacking = [w for w in self.e_scheme.wrappers if w not in self.a_scheme.wrappers]
        for side, wrappers in (("actual", extra), ("expected", lacking)):
            if not wrappers:
                continue
            names = self.actual if side == "actual" else self.expected
            keys = [n for n in names if strip_wrappers(n)[1]]
            renamed = {strip_wrappers(n)[0]: t for n, t in names.items()}
            parts = ", ".join(f"`{w.value}` ({w.who})" for w in wrappers)
            if side == "actual":
                self.actual = renamed
                message = f"ACTUAL names carry wrapper parts {parts} that EXPECTED lacks"
                fix = _strip_fix(wrappers)
            else:
                self.expected = renamed
                message = f"EXPECTED names carry wrapper parts {parts} that ACTUAL lacks"
                fix = "load into the unwrapped model (e.g. `model.module`), or add the prefix"
            self.add(ExplanationKind.PREFIX, message, fix, keys)

    def _prefix(self) -> None:
        missing, unexpected = self._missing(), self._unexpected()
        if not missing or not unexpected:
            return
        votes: Counter[tuple[str, str]] = Counter()
        missing_set = set(missing)
        for u in unexpected:
            for i in [k.start() for k in re.finditer(r"\.", u)]:
                if u[i + 1 :] in missing_set:
                    votes[("strip", u[: i + 1])] += 1
        by_suffix = defaultdict(list)
        for m in missing:
            for i in [k.start() for k in re.finditer(r"\.", m)]:
                by_suffix[m[i + 1 :]].append(m[: i + 1])
        for u in unexpected:
            for p in by_suffix.get(u, []):
                votes[("add", p)] += 1
        if not votes:
            return
        (action, prefix), count = votes.most_common(1)[0]
        if count < max(1, min(len(missing), len(unexpected)) // 2):
            return
        if action == "strip":
            keys = [u for u in unexpected if u.startswith(prefix)]
            self.actual = {_drop(n, prefix): t for n, t in self.actual.items()}
            message = f"ACTUAL names carry a `{prefix}` prefix that EXPECTED lacks"
            fix = f"strip it: {{k.removeprefix({prefix!r}): v for k, v in state_dict.items()}}"
        else:
            keys = [u for u in unexpected if prefix + u in missing_set]
            self.actual = {
                (prefix + n if prefix + n in missing_set else n): t for n, t in self.actual.items()
            }
            message = f"EXPECTED names have a `{prefix}` prefix that ACTUAL lacks"
            fix = f"add it: {{{prefix!r} + k: v for k, v in state_dict.items()}}"
            if prefix == "model.":
                message += " (a base model saved, a ForCausalLM expected)"
        self.add(ExplanationKind.PREFIX, message, fix, keys)

    def _naming_scheme(self) -> None:
        e, a = self.e_scheme.scheme, self.a_scheme.scheme
        hf = (Scheme.HF_LLAMA, Scheme.HF_QWEN2)
        if a is Scheme.MCORE_GPT and e in hf:
            direction, command = Direction.MCORE_TO_HF, "mcore-to-hf"
        elif a in hf and e is Scheme.MCORE_GPT:
            direction, command = Direction.HF_TO_MCORE, "hf-to-mcore"
        else:
            return
        translated = translate(self.actual, direction)
        found = [n for n in translated if n in self.expected]
        model_type = self._model_type()
        self.add(
            ExplanationKind.NAMING_SCHEME,
            f"ACTUAL uses {a.family} names ({a.value}), EXPECTED wants {e.family} names "
            f"({e.value}); {len(found)} of {len(self.expected)} expected tensors are in ACTUAL "
            "under the other names (q/k/v fused as linear_qkv, gate/up as linear_fc1)",
            f"rankscope ckpt convert {command} {self.a_manifest.source} OUT "
            f"--model-type {model_type}",
            self._unexpected(),
        )
        if direction is Direction.MCORE_TO_HF and all(t.shape for t in self.expected.values()):
            # compare in Megatron's names, with the shapes the HF tensors make (TP shards show)
            self.expected = mcore_infos(self.expected)
            return
        self.actual = {n: TensorInfo(n, (), None) for n in translated}
        self.shapes_known = False

    def _model_type(self) -> str:
        for m in (self.e_manifest, self.a_manifest):
            if m.dims is not None:
                return m.dims.model_type
        schemes = (self.e_scheme.scheme, self.a_scheme.scheme)
        return "qwen2" if Scheme.HF_QWEN2 in schemes else "llama"

    def _layers(self) -> None:
        e_layers, a_layers = _layers(self.expected), _layers(self.actual)
        if not e_layers or not a_layers or set(e_layers) == set(a_layers):
            return
        gone = sorted(set(e_layers) - set(a_layers))
        extra = sorted(set(a_layers) - set(e_layers))
        keys = [n for i in gone for n in e_layers[i]] + [n for i in extra for n in a_layers[i]]
        stage = set(a_layers) < set(e_layers) and _contiguous(sorted(a_layers))
        what = (
            "a pipeline-parallel stage, or a config for another model size"
            if stage
            else "a config for another model size (num_hidden_layers)"
        )
        self.add(
            ExplanationKind.LAYER_COUNT,
            f"ACTUAL has {len(a_layers)} layers ({_span(a_layers)}), EXPECTED "
            f"{len(e_layers)} ({_span(e_layers)}): {what}",
            "merge the pipeline stages, or use the config the checkpoint was saved with",
            keys,
        )
        for i in gone:
            for n in e_layers[i]:
                self.expected.pop(n, None)
        for i in extra:
            for n in a_layers[i]:
                self.actual.pop(n, None)

    def _tied(self) -> None:
        heads = ("lm_head.weight", "output_layer.weight")
        embeds = ("model.embed_tokens.weight", "embedding.word_embeddings.weight")
        if not any(n in self.expected or n in self.actual for n in embeds):
            return
        for head in heads:
            if head in self.expected and head not in self.actual:
                self.add(
                    ExplanationKind.TIED_EMBEDDINGS,
                    f"ACTUAL has no {head}: it was saved with tied embeddings, "
                    "EXPECTED unties them",
                    "set tie_word_embeddings=true in config.json (or copy the embedding into "
                    f"{head})",
                    [head],
                )
                self.expected.pop(head)
            elif head in self.actual and head not in self.expected:
                self.add(
                    ExplanationKind.TIED_EMBEDDINGS,
                    f"ACTUAL has an untied {head}, EXPECTED ties it to the embeddings",
                    "set tie_word_embeddings=false in config.json, or drop the tensor if it "
                    "equals the embedding",
                    [head],
                )
                self.actual.pop(head)

    def _fused_split(self) -> None:
        groups = (
            (("q_proj", "k_proj", "v_proj"), ("qkv_proj", "query_key_value", "c_attn")),
            (("gate_proj", "up_proj"), ("gate_up_proj",)),
        )
        missing, unexpected = set(self._missing()), set(self._unexpected())
        for split, fused_names in groups:
            for fused in fused_names:
                for side_split, side_fused, who in (
                    (missing, unexpected, "ACTUAL fuses"),
                    (unexpected, missing, "ACTUAL splits"),
                ):
                    hits = []
                    for f in sorted(side_fused):
                        if f".{fused}." not in f:
                            continue
                        parts = [f.replace(f".{fused}.", f".{s}.") for s in split]
                        if all(p in side_split for p in parts):
                            hits.append((f, parts))
                    if not hits:
                        continue
                    keys = [f for f, _ in hits] + [p for _, ps in hits for p in ps]
                    self.add(
                        ExplanationKind.FUSED_SPLIT,
                        f"{who} {'/'.join(split)} {'into' if 'fuses' in who else 'out of'} "
                        f"{fused} ({len(hits)} tensors): another model class or implementation",
                        f"split {fused} along dim 0 (or fuse {'/'.join(split)}) to match",
                        keys,
                    )
                    for f, parts in hits:
                        for n in [f, *parts]:
                            self.expected.pop(n, None)
                            self.actual.pop(n, None)

    def _shapes(self) -> None:
        if not self.shapes_known:
            return
        by_tp: dict[int, list[str]] = defaultdict(list)
        dims_seen: dict[int, set[int]] = defaultdict(set)
        vocab, other = [], []
        for name in sorted(set(self.expected) & set(self.actual)):
            e, a = self.expected[name].shape, self.actual[name].shape
            if e == a:
                continue
            ratio = _shard_ratio(e, a)
            if ratio is not None:
                by_tp[ratio[0]].append(name)
                dims_seen[ratio[0]].add(ratio[1])
            elif _is_embedding(name) and len(e) == len(a) == 2 and e[1] == a[1]:
                vocab.append(name)
            else:
                other.append(name)
        for n, keys in sorted(by_tp.items(), key=lambda kv: -len(kv[1])):
            dims = " and ".join(f"dim {d}" for d in sorted(dims_seen[n]))
            self.add(
                ExplanationKind.TENSOR_PARALLEL,
                f"looks like one shard of tensor parallel size {n}: {len(keys)} tensors are "
                f"the expected shape divided by {n} along {dims}",
                "merge the shards (`rankscope ckpt convert mcore-to-hf DIR OUT` reads "
                f"mp_rank_NN[_PPP]/ folders), or load with tensor parallel size {n}",
                keys,
            )
        if vocab:
            e, a = self.expected[vocab[0]].shape, self.actual[vocab[0]].shape
            padded = self.a_scheme.scheme is Scheme.MCORE_GPT and a[0] > e[0] and a[0] % 8 == 0
            self.add(
                ExplanationKind.VOCAB,
                f"vocabulary sizes differ: EXPECTED {e[0]} rows, ACTUAL {a[0]}: "
                + (
                    f"Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by"
                    f" x TP ({a[0] - e[0]} padding rows)"
                    if padded
                    else "another tokenizer, or a vocabulary padded for tensor parallelism"
                ),
                "`rankscope ckpt convert mcore-to-hf` drops the padding rows"
                if padded
                else "set vocab_size to the checkpoint's, or trim/pad the embedding rows",
                vocab,
            )
        if other:
            first = other[0]
            self.add(
                ExplanationKind.SHAPE,
                f"{len(other)} tensors have other shapes, e.g. {first}: EXPECTED "
                f"{list(self.expected[first].shape)}, ACTUAL {list(self.actual[first].shape)}",
                "check hidden_size / intermediate_size / head counts in config.json",
                other,
            )

    def _renamed_and_dropped(self) -> None:
        missing, unexpected = self._missing(), self._unexpected()
        pairs: list[tuple[str, str]] = []
        if self.shapes_known:
            pool = list(unexpected)
            for m in missing:
                same = [u for u in pool if self.actual[u].shape == self.expected[m].shape]
                if not same:
                    continue
                best = max(same, key=lambda u: difflib.SequenceMatcher(None, m, u).ratio())
                pairs.append((m, best))
                pool.remove(best)
        if pairs:
            shown = "; ".join(f"{u} -> {m}" for m, u in pairs[:EXAMPLES])
            self.add(
                ExplanationKind.RENAMED,
                f"{len(pairs)} tensors look renamed (same shape, other name): {shown}",
                "rename them when loading (a key map), or fix the code that saved them",
                [u for _, u in pairs],
            )
        paired_m = {m for m, _ in pairs}
        paired_u = {u for _, u in pairs}
        dropped = [m for m in missing if m not in paired_m]
        extra = [u for u in unexpected if u not in paired_u]
        if dropped:
            self.add(
                ExplanationKind.DROPPED,
                f"{len(dropped)} expected tensors are absent from ACTUAL under any name "
                f"({_where(dropped)})",
                "the checkpoint is incomplete: a missing shard, or a save that filtered them",
                dropped,
            )
        if extra:
            self.add(
                ExplanationKind.EXTRA,
                f"{len(extra)} tensors in ACTUAL that EXPECTED does not have ({_where(extra)})",
                "another architecture or config; or ignore them with strict=False",
                extra,
            )

    def _dtypes(self) -> None:
        pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
        for name in sorted(set(self.expected) & set(self.actual)):
            e, a = self.expected[name].dtype, self.actual[name].dtype
            if e and a and e != a and self.expected[name].shape == self.actual[name].shape:
                pairs[(e, a)].append(name)
        for (e, a), keys in pairs.items():
            self.add(
                ExplanationKind.DTYPE,
                f"{len(keys)} tensors are {a} in ACTUAL, {e} in EXPECTED",
                f"cast when saving or loading (torch_dtype={_torch_name(e)})",
                keys,
            )


def _strip_fix(wrappers: list[Wrapper]) -> str:
    parts = [repr(w.value) for w in wrappers]
    if wrappers == [Wrapper.DDP]:
        return "save `model.module.state_dict()`, or strip it: k.removeprefix('module.')"
    return f"remove {', '.join(parts)} from every key, or save the unwrapped module's state_dict"


def _drop(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


_ANY_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _layers(names: dict[str, TensorInfo]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for n in names:
        m = _ANY_LAYER.search(n)
        if m:
            out[int(m.group(1))].append(n)
    return dict(out)


def _contiguous(values: list[int]) -> bool:
    return values == list(range(values[0], values[-1] + 1))


def _span(layers: dict[int, list[str]]) -> str:
    keys = sorted(layers)
    return f"{keys[0]}-{keys[-1]}" if _contiguous(keys) else ",".join(map(str, keys))


def _shard_ratio(expected: tuple[int, ...], actual: tuple[int, ...]) -> tuple[int, int] | None:
    """(N, dim) when `actual` is `expected` with one dimension divided by N > 1."""
    if len(expected) != len(actual):
        return None
    diff = [d for d, (e, a) in enumerate(zip(expected, actual, strict=True)) if e != a]
    if len(diff) != 1:
        return None
    d = diff[0]
    e, a = expected[d], actual[d]
    if a == 0 or e <= a or e % a:
        return None
    return e // a, d


def _is_embedding(name: str) -> bool:
    return any(k in name for k in ("embed_tokens", "word_embeddings", "lm_head", "output_layer"))


def _where(keys: list[str]) -> str:
    layers = sorted({int(m.group(1)) for k in keys if (m := _ANY_LAYER.search(k))})
    parts = Counter(_ANY_LAYER.sub(".layers.N.", "." + k).lstrip(".") for k in keys)
    common = ", ".join(p for p, _ in parts.most_common(2))
    if layers:
        return f"{common} in layers {_span({i: [] for i in layers})}"
    return common


def _torch_name(code: str) -> str:
    return {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}.get(
        code, code.lower()
    )
