"""The lint rules: a table, one rule per row, each a pure function of the plan and context.

To add a rule: write `def rule(plan, ctx) -> RuleResult` and add a row to `RULES`. A finding
names the keys and their values, shows the arithmetic, and gives a corrected value in `fix`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rankscope.doctor.config_lint.load import KEYS
from rankscope.doctor.config_lint.memory import LIMIT, estimate
from rankscope.doctor.config_lint.model import ClusterShape, ModelShape, Plan, RuleResult
from rankscope.doctor.preflight.model import Status
from rankscope.units import human_bytes

__all__ = ["RULES", "LintContext", "largest_divisor_at_most", "run_rules"]

NO_BF16 = ("V100", "T4", "P100", "P40", "P4", "K80", "M60", "TITAN V", "RTX 20", "QUADRO RTX")
"""GPUs before compute capability 8.0 (Ampere): no bf16 in hardware."""


@dataclass(frozen=True)
class LintContext:
    model: ModelShape | None = None
    cluster: ClusterShape | None = None
    device_bytes: float | None = None


Rule = Callable[[Plan, LintContext], RuleResult]


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest d <= limit that divides n (1 at worst)."""
    return next(d for d in range(max(1, min(n, limit)), 0, -1) if n % d == 0)


def _ok(rule: str, message: str) -> RuleResult:
    return RuleResult(rule, Status.OK, message)


def _skip(rule: str, message: str) -> RuleResult:
    return RuleResult(rule, Status.SKIP, message)


def batch_divisible(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "train batch / mini batch"
    tb, mini = plan.train_batch_size, plan.ppo_mini_batch_size
    if tb is None or mini is None:
        return _skip(name, "data.train_batch_size or actor.ppo_mini_batch_size not set")
    keys = {KEYS["train_batch_size"]: tb, KEYS["ppo_mini_batch_size"]: mini}
    if mini <= 0 or tb % mini:
        fixed = largest_divisor_at_most(tb, max(mini, 1))
        return RuleResult(
            name,
            Status.FAIL,
            f"{tb} % {mini} = {tb % mini if mini > 0 else 'undefined'}: the mini batches do "
            f"not split the train batch; {fixed} does ({tb} / {fixed} = {tb // fixed} updates)",
            keys,
            {KEYS["ppo_mini_batch_size"]: fixed},
        )
    return _ok(name, f"{tb} / {mini} = {tb // mini} updates per step")


def _share_rule(
    name: str, plan: Plan, mini: int | None, micro: int | None, mini_key: str, micro_key: str
) -> RuleResult:
    """Per-GPU share of a mini batch, mini x n / (world / sp), must be whole and hold the
    micro batch a whole number of times (the gradient accumulation steps)."""
    if mini is None or micro is None:
        return _skip(name, f"{mini_key} or {micro_key} not set")
    if plan.use_dynamic_bsz:
        return _skip(name, "use_dynamic_bsz: micro batches are cut by tokens")
    dp = plan.world // max(plan.sequence_parallel, 1)
    total = mini * plan.rollout_n
    keys = {
        mini_key: mini,
        KEYS["rollout_n"]: plan.rollout_n,
        KEYS["nnodes"]: plan.nnodes,
        KEYS["n_gpus_per_node"]: plan.n_gpus_per_node,
        KEYS["sequence_parallel"]: plan.sequence_parallel,
        micro_key: micro,
    }
    arithmetic = f"{mini} x {plan.rollout_n} / ({plan.world} / {plan.sequence_parallel})"
    if total % dp or total < dp:
        fixed = math.ceil(dp / plan.rollout_n) if total < dp else mini - mini % dp + dp
        while fixed * plan.rollout_n % dp:
            fixed += 1
        return RuleResult(
            name,
            Status.FAIL,
            f"per-GPU share {arithmetic} = {total / dp:g} is not a whole number >= 1",
            keys,
            {mini_key: fixed},
        )
    share = total // dp
    if micro > share:
        return RuleResult(
            name,
            Status.FAIL,
            f"per-GPU share {arithmetic} = {share} < micro batch {micro}: "
            f"gradient accumulation {share} // {micro} = 0 steps (no update, NaN loss)",
            keys,
            {micro_key: share},
        )
    if micro <= 0 or share % micro:
        fixed = largest_divisor_at_most(share, max(micro, 1))
        return RuleResult(
            name,
            Status.FAIL,
            f"per-GPU share {arithmetic} = {share} is not a multiple of micro batch {micro} "
            f"({share} % {micro} = {share % micro if micro > 0 else 'undefined'})",
            keys,
            {micro_key: fixed},
        )
    return _ok(name, f"per-GPU share {arithmetic} = {share}; {share // micro} accumulation steps")


def actor_share(plan: Plan, ctx: LintContext) -> RuleResult:
    return _share_rule(
        "actor micro batch",
        plan,
        plan.ppo_mini_batch_size,
        plan.ppo_micro_batch_size_per_gpu,
        KEYS["ppo_mini_batch_size"],
        KEYS["ppo_micro_batch_size_per_gpu"],
    )


def critic_share(plan: Plan, ctx: LintContext) -> RuleResult:
    if plan.critic_ppo_micro_batch_size_per_gpu is None:
        return _skip("critic micro batch", "no critic micro batch in the config")
    return _share_rule(
        "critic micro batch",
        plan,
        plan.critic_ppo_mini_batch_size or plan.ppo_mini_batch_size,
        plan.critic_ppo_micro_batch_size_per_gpu,
        KEYS["critic_ppo_mini_batch_size"],
        KEYS["critic_ppo_micro_batch_size_per_gpu"],
    )


def log_prob_micro(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "log-prob micro batches"
    bad = {
        KEYS[f]: getattr(plan, f)
        for f in ("log_prob_micro_batch_size_per_gpu", "ref_log_prob_micro_batch_size_per_gpu")
        if getattr(plan, f) is not None and getattr(plan, f) <= 0
    }
    if bad:
        return RuleResult(name, Status.FAIL, "must be >= 1", bad, dict.fromkeys(bad, 1))
    return _ok(name, "set and positive, or left to verl's defaults")


def tp_divides_heads(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "rollout TP / attention heads"
    m = ctx.model
    if m is None:
        return _skip(name, "no model config.json (pass --model PATH)")
    tp = plan.rollout_tp
    kv_ok = m.num_kv_heads % tp == 0 or tp % m.num_kv_heads == 0
    if m.num_heads % tp == 0 and kv_ok:
        return _ok(name, f"{m.num_heads} heads / {tp} = {m.num_heads // tp}")
    fixed = next(
        d
        for d in range(tp, 0, -1)
        if m.num_heads % d == 0 and (m.num_kv_heads % d == 0 or d % m.num_kv_heads == 0)
    )
    return RuleResult(
        name,
        Status.FAIL,
        f"num_attention_heads {m.num_heads} % {tp} = {m.num_heads % tp}, "
        f"num_key_value_heads {m.num_kv_heads} % {tp} = {m.num_kv_heads % tp}: "
        f"TP must divide the heads; {fixed} does",
        {
            KEYS["rollout_tp"]: tp,
            "num_attention_heads": m.num_heads,
            "num_key_value_heads": m.num_kv_heads,
        },
        {KEYS["rollout_tp"]: fixed},
    )


def tp_within_node(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "rollout TP / GPUs"
    tp, per_node = plan.rollout_tp, plan.n_gpus_per_node
    keys = {KEYS["rollout_tp"]: tp, KEYS["n_gpus_per_node"]: per_node, KEYS["nnodes"]: plan.nnodes}
    if tp > per_node or plan.world % tp:
        fixed = largest_divisor_at_most(math.gcd(per_node, plan.world), tp)
        return RuleResult(
            name,
            Status.FAIL,
            f"TP {tp} must be <= GPUs per node {per_node} and divide the {plan.world} GPUs "
            f"({plan.world} % {tp} = {plan.world % tp})",
            keys,
            {KEYS["rollout_tp"]: fixed},
        )
    return _ok(name, f"{plan.world} GPUs / TP {tp} = {plan.world // tp} rollout replicas")


def sequence_parallel(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "sequence parallel"
    sp = plan.sequence_parallel
    heads = ctx.model.num_heads if ctx.model else None
    if sp <= 0 or plan.world % sp or (heads is not None and heads % sp):
        fixed = largest_divisor_at_most(math.gcd(plan.world, heads or plan.world), max(sp, 1))
        return RuleResult(
            name,
            Status.FAIL,
            f"ulysses size {sp} must divide the {plan.world} GPUs"
            + (f" and the {heads} heads" if heads is not None else ""),
            {KEYS["sequence_parallel"]: sp},
            {KEYS["sequence_parallel"]: fixed},
        )
    return _ok(name, f"{sp} divides the GPUs" + (" and the heads" if heads else ""))


def cluster_gpus(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "GPUs in the cluster"
    if ctx.cluster is None:
        return _skip(name, "no cluster asked (pass --address)")
    per_node = plan.n_gpus_per_node
    fitting = sum(1 for g in ctx.cluster.gpus_per_node if g >= per_node)
    total = sum(ctx.cluster.gpus_per_node)
    keys = {KEYS["nnodes"]: plan.nnodes, KEYS["n_gpus_per_node"]: per_node}
    if fitting < plan.nnodes:
        best = max(ctx.cluster.gpus_per_node, default=0)
        return RuleResult(
            name,
            Status.FAIL,
            f"{plan.nnodes} x {per_node} = {plan.world} GPUs wanted; the cluster has {total} "
            f"({', '.join(str(g) for g in ctx.cluster.gpus_per_node)} per node): "
            f"{fitting} nodes have {per_node}",
            keys,
            {} if best == 0 else _fewer_gpus(fitting, best),
        )
    return _ok(name, f"{plan.nnodes} x {per_node} GPUs available ({total} in the cluster)")


def _fewer_gpus(fitting: int, best: int) -> dict[str, int]:
    if fitting == 0:
        return {KEYS["nnodes"]: 1, KEYS["n_gpus_per_node"]: best}
    return {KEYS["nnodes"]: fitting}


def bf16_hardware(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "bf16 on the GPUs"
    wants = {
        k: v
        for k, v in (
            (KEYS["param_dtype"], plan.param_dtype),
            (KEYS["rollout_dtype"], plan.rollout_dtype),
        )
        if v in ("bf16", "bfloat16")
    }
    if not wants:
        return _ok(name, "no bf16 asked for")
    names = ctx.cluster.gpu_names if ctx.cluster else ()
    if not names:
        return _skip(name, "GPU models unknown (pass --address to a cluster with GPUs)")
    old = sorted({n for n in names if any(t in n.upper() for t in NO_BF16)})
    if old:
        return RuleResult(
            name,
            Status.FAIL,
            f"bf16 asked for on {', '.join(old)} (compute capability < 8.0: no bf16)",
            wants,
            {k: "fp16" if k.endswith("param_dtype") else "float16" for k in wants},
        )
    return _ok(name, f"bf16 supported on {', '.join(sorted(set(names)))}")


def memory_per_gpu(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "memory per GPU"
    if ctx.model is None:
        return _skip(name, "no model config.json (pass --model PATH)")
    e = estimate(plan, ctx.model, ctx.device_bytes)
    parts = (
        f"train {human_bytes(e.train_peak)} (params {human_bytes(e.params)}, grads "
        f"{human_bytes(e.grads)}, optimizer {human_bytes(e.optimizer)}, activations "
        f"{human_bytes(e.activations)}, logits {human_bytes(e.logits)}), rollout "
        f"{human_bytes(e.rollout_peak)}"
    )
    if e.fraction is None:
        return _skip(name, f"{parts}; device memory unknown (pass --gpu-memory GiB)")
    verdict = f"peak {human_bytes(e.peak)} = {e.fraction:.0%} of {human_bytes(e.device_bytes or 0)}"
    if e.fraction <= LIMIT:
        return _ok(name, f"{verdict}: {parts}")
    knobs = "; ".join(
        f"{i}. {k.name}: {k.change} -> {human_bytes(k.peak_after_bytes)} "
        f"({k.peak_after_bytes / (e.device_bytes or 1):.0%})"
        for i, k in enumerate(e.knobs, 1)
    )
    first = e.knobs[0].changes if e.knobs else {}
    keys = {k: _value(plan, k) for knob in e.knobs for k in knob.changes}
    return RuleResult(
        name,
        Status.FAIL,
        f"{verdict} > {LIMIT:.0%}: {parts}. In order of effect: {knobs or 'no knob helps'}",
        {"gpu memory": human_bytes(e.device_bytes or 0), **keys},
        first,
    )


def _value(plan: Plan, key: str) -> object:
    return next(getattr(plan, f) for f, k in KEYS.items() if k == key)


def rollout_kv_cache(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "rollout KV cache"
    if ctx.model is None or not ctx.device_bytes:
        return _skip(name, "needs the model config and the device memory")
    e = estimate(plan, ctx.model, ctx.device_bytes)
    room = e.rollout_reserved - e.rollout_weights
    keys = {
        KEYS["gpu_memory_utilization"]: plan.gpu_memory_utilization,
        KEYS["rollout_tp"]: plan.rollout_tp,
    }
    if room <= 0:
        return RuleResult(
            name,
            Status.FAIL,
            f"gpu_memory_utilization {plan.gpu_memory_utilization} x "
            f"{human_bytes(ctx.device_bytes)} does not hold the weights "
            f"({human_bytes(e.rollout_weights)} per GPU)",
            keys,
            {KEYS["rollout_tp"]: plan.rollout_tp * 2},
        )
    if e.kv_cache_needed > room:
        return RuleResult(
            name,
            Status.WARN,
            f"KV cache for every sequence at full length {human_bytes(e.kv_cache_needed)} > "
            f"{human_bytes(room)} left in vLLM's share: vLLM preempts and recomputes (slower)",
            keys,
        )
    return _ok(name, f"needs {human_bytes(e.kv_cache_needed)} of {human_bytes(room)}")


def checkpoint_dir(plan: Plan, ctx: LintContext) -> RuleResult:
    name = "checkpoint dir"
    path = plan.checkpoint_dir
    if not path:
        return _skip(name, "trainer.default_local_dir not set")
    keys = {KEYS["checkpoint_dir"]: path, KEYS["nnodes"]: plan.nnodes}
    if plan.nnodes > 1 and not path.startswith(("/", "~", "$", "hdfs://", "s3://", "gs://")):
        return RuleResult(
            name,
            Status.WARN,
            f"{path} is relative: on {plan.nnodes} nodes each rank writes under its own working "
            "directory, and a resume on another node finds nothing",
            keys,
            {KEYS["checkpoint_dir"]: f"/shared/{path}"},
        )
    seen = ctx.cluster.shared_seen if ctx.cluster else None
    if seen:
        missing = {label: why for label, why in seen.items() if why != "seen"}
        if missing:
            return RuleResult(
                name,
                Status.FAIL,
                f"{path} is not shared: "
                + "; ".join(f"{label}: {why}" for label, why in missing.items()),
                keys,
            )
        return _ok(name, f"{path}: a sentinel written on one node is seen on all {len(seen)}")
    return _ok(
        name, f"{path}: check every node sees it with `rankscope doctor --shared-path {path}`"
    )


RULES: tuple[tuple[str, Rule], ...] = (
    ("train batch / mini batch", batch_divisible),
    ("actor micro batch", actor_share),
    ("critic micro batch", critic_share),
    ("log-prob micro batches", log_prob_micro),
    ("rollout TP / attention heads", tp_divides_heads),
    ("rollout TP / GPUs", tp_within_node),
    ("sequence parallel", sequence_parallel),
    ("GPUs in the cluster", cluster_gpus),
    ("bf16 on the GPUs", bf16_hardware),
    ("memory per GPU", memory_per_gpu),
    ("rollout KV cache", rollout_kv_cache),
    ("checkpoint dir", checkpoint_dir),
)
"""(name, rule): the report's rows, in this order."""


def run_rules(plan: Plan, ctx: LintContext) -> list[RuleResult]:
    return [rule(plan, ctx) for _, rule in RULES]
