"""`verify_distributed_tensors` and `inspect_distributed_tensor`: the public entry points.

Round 1 all-gathers one fingerprint per tensor (communication grows with the number of
tensors, never their size). Only when hashes differ: round 2 sends each differing tensor's
reference copy to the ranks that differ from it (within a byte budget), and round 3 gathers
their exact differences, plus summaries for the tensors past the budget. Every rank then
builds the same report; the lowest rank sends it to the hub as a `consistency` event.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rankscope.consistency.analysis import compare, plan_differences, spread
from rankscope.consistency.model import (
    DEFAULT_BUDGET_BYTES,
    ConsistencyReport,
    RankDetails,
    RankFingerprints,
    TensorSpread,
)
from rankscope.errors import ConsistencyError, UserError
from rankscope.runtime import deadlines

if TYPE_CHECKING:  # torch is imported on first use: `import rankscope` stays light
    import torch

    from rankscope.consistency.worker_transport import Transport

log = logging.getLogger("rankscope")

EVENT_KIND = "consistency"
MAX_EVENT_TENSORS = 100
"""Differing tensors listed in the hub event; the report itself keeps them all."""

_calls: collections.Counter[str] = collections.Counter()
_calls_lock = threading.Lock()


def verify_distributed_tensors(
    tensor_dict: Any,
    tolerance: float = 1e-6,
    operation_name: str = "",
    *,
    group: Any = None,
    ranks: list[int] | None = None,
    reference: str | int = "majority",
    include_grads: bool = False,
    raise_on_mismatch: bool = False,
    rank: int | None = None,
    deadline_s: float = deadlines.EXCHANGE_S,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> ConsistencyReport:
    """Check that tensors which should be identical across ranks are; name who differs.

    Call it on every participating rank with the same tensor names. Example:
    `report = rankscope.verify_distributed_tensors(model, operation_name="after_step")`.

    tensor_dict: a mapping of name to tensor (nested allowed), a state_dict, or an nn.Module.
    group: the torch.distributed group (default: the default group when one is initialized).
    ranks: with no process group, the participants that meet at the rankscope hub; `rank` is
        this process's id among them (default: its rankscope/torchrun rank); `deadline_s` is
        how long to wait for them.
    reference: "majority" (outliers are the ranks that differ from most) or a rank.
    budget_bytes: how many bytes of differing tensors may be exchanged for exact differences.
    """
    from rankscope.consistency.fingerprint import fingerprint_tensors
    from rankscope.consistency.flatten import flatten_tensors
    from rankscope.consistency.worker_transport import decode, encode

    _check_options(tolerance, reference, budget_bytes, deadline_s)  # the same on every rank
    transport = _transport(group, ranks, rank, deadline_s, f"verify/{operation_name}")
    # Every rank reaches the first exchange, whatever its tensors: one rank raising before it
    # would leave the others waiting in the collective until the backend's timeout.
    try:
        flat = flatten_tensors(tensor_dict, include_grads=include_grads)
    except UserError as exc:
        mine = RankFingerprints(transport.rank, (), input_error=str(exc))
    else:
        try:
            mine = RankFingerprints(
                transport.rank, tuple(fingerprint_tensors(flat.tensors)), flat.skipped
            )
        except Exception as exc:  # stay in step with the other ranks; report, do not hang them
            log.warning("rankscope: could not fingerprint tensors: %s", exc)
            error = f"{type(exc).__name__}: {exc}"
            mine = RankFingerprints(transport.rank, (), flat.skipped, error)
    first = transport.gather(encode(mine))
    everyone = {r: decode(p) for r, p in first.payloads.items()}
    bad = {r: fp.input_error for r, fp in everyone.items() if fp.input_error}
    if bad:
        raise UserError(
            f"verify_distributed_tensors({operation_name!r}): bad input on "
            + "; ".join(f"rank {r}: {error}" for r, error in sorted(bad.items()))
        )
    gathered = {r: fp for r, fp in everyone.items() if fp.error is None}
    plans = plan_differences(gathered, reference=reference, budget_bytes=budget_bytes)
    details: dict[int, RankDetails] = {}
    if plans:
        details = _details(transport, plans, dict(flat.tensors), gathered)
    report = compare(
        gathered,
        details,
        tolerance=tolerance,
        operation_name=operation_name,
        reference=reference,
        missing_ranks=first.missing,
        budget_bytes=budget_bytes,
        transport=transport.name,
    )
    errors = tuple(
        f"rank {r} could not fingerprint: {fp.error}" for r, fp in everyone.items() if fp.error
    )
    if errors:
        report = _with_notes(report, errors)
    if report.ranks and transport.rank == min(report.ranks):
        _emit(report)
    if raise_on_mismatch and not report.ok:
        raise ConsistencyError(report)
    return report


def inspect_distributed_tensor(
    tensor: torch.Tensor,
    name: str | None = None,
    *,
    group: Any = None,
    ranks: list[int] | None = None,
    rank: int | None = None,
    deadline_s: float = deadlines.EXCHANGE_S,
) -> TensorSpread:
    """Per-rank shape, dtype, device, mean, std, min, max, norm and NaN/Inf counts of a tensor.

    Shows at a glance whether it is replicated (bitwise equal everywhere), sharded (shapes
    differ) or drifting. Example: `print(rankscope.inspect_distributed_tensor(w, "fc.weight"))`.
    """
    import torch

    from rankscope.consistency.fingerprint import describe

    if not isinstance(tensor, torch.Tensor):
        raise UserError(
            f"inspect_distributed_tensor: expected a tensor, got {type(tensor).__name__}"
        )
    transport = _transport(group, ranks, rank, deadline_s, f"inspect/{name or ''}")
    gathered = transport.gather(describe(tensor, transport.rank))
    return spread(name or "tensor", gathered.payloads, missing_ranks=gathered.missing)


# ------------------------------------------------------------------------------ internals
def _details(
    transport: Transport,
    plans: list[Any],
    local: dict[str, torch.Tensor],
    gathered: Mapping[int, RankFingerprints],
) -> dict[int, RankDetails]:
    """Rounds 2 and 3: exact differences within the budget, summaries past it."""
    from rankscope.consistency.fingerprint import difference, summarize_tensors
    from rankscope.consistency.worker_transport import decode, encode

    me = transport.rank
    received = transport.share([p for p in plans if p.exact], local)
    differences = {name: difference(local[name], ref) for name, ref in received.items()}
    estimated = [
        (p.name, local[p.name])
        for p in plans
        if not p.exact and p.name in local and (me == p.reference or me in p.outliers)
    ]
    summaries = summarize_tensors(estimated) if estimated else {}
    mine = RankDetails(me, summaries, differences)
    return {r: decode(p) for r, p in transport.gather(encode(mine)).payloads.items()}


def _transport(
    group: Any, ranks: list[int] | None, rank: int | None, deadline_s: float, what: str
) -> Transport:
    import torch.distributed as dist

    from rankscope.consistency.worker_transport import HubTransport, TorchTransport

    if group is not None or (ranks is None and dist.is_available() and dist.is_initialized()):
        if ranks is not None:
            raise UserError("pass either group= (torch.distributed) or ranks= (hub), not both")
        return TorchTransport(group)
    from rankscope.context import get_context

    context = get_context()
    if ranks is None:
        if context.world_size is None:
            raise UserError(
                "no torch.distributed group is initialized: pass ranks=[...] (and rank=...) "
                "to compare through the rankscope hub"
            )
        ranks = list(range(context.world_size))
    me = rank if rank is not None else context.rank
    if me is None:
        raise UserError(
            "this process has no rank: pass rank=... or call rankscope.init(rank=..., "
            "world_size=...)"
        )
    participants = sorted({int(r) for r in ranks})
    key = f"rankscope.consistency/{context.job_id}/{what}/{','.join(map(str, participants))}"
    with _calls_lock:
        _calls[key] += 1
        key = f"{key}/{_calls[key]}"
    return HubTransport(participants, int(me), key, deadline_s)


def _check_options(
    tolerance: float, reference: str | int, budget_bytes: int, deadline_s: float
) -> None:
    if not tolerance >= 0:
        raise UserError(f"tolerance must be >= 0, got {tolerance}")
    if reference != "majority" and (isinstance(reference, bool) or not isinstance(reference, int)):
        raise UserError(f"reference must be 'majority' or a rank, got {reference!r}")
    if budget_bytes < 0:
        raise UserError(f"budget_bytes must be >= 0, got {budget_bytes}")
    if deadline_s <= 0:
        raise UserError(f"deadline_s must be > 0 seconds, got {deadline_s}")


def _with_notes(report: ConsistencyReport, notes: tuple[str, ...]) -> ConsistencyReport:
    from dataclasses import replace

    return replace(report, notes=report.notes + notes)


def _emit(report: ConsistencyReport) -> None:
    """The report as a hub event (so the CLI and reports can show it); never raises."""
    try:
        from rankscope.runtime.api import current_probe
        from rankscope.serialize import plain

        probe = current_probe()
        if probe is None:
            return
        differing = sorted(report.differing, key=lambda t: t.name)
        probe.emit(
            EVENT_KIND,
            {
                "operation_name": report.operation_name,
                "summary": report.summary,
                "ok": report.ok,
                "ranks": list(report.ranks),
                "missing_ranks": list(report.missing_ranks),
                "tensors": len(report.tensors),
                "differing": [plain(t) for t in differing[:MAX_EVENT_TENSORS]],
                "differing_total": len(differing),
                "nan_ranks": list(report.nan_ranks),
                "inf_ranks": list(report.inf_ranks),
                "tolerance": report.tolerance,
                "exchanged_bytes": report.exchanged_bytes,
                "transport": report.transport,
                "notes": list(report.notes),
            },
        )
    except Exception as exc:  # the check's result matters more than its event
        log.debug("rankscope: consistency event not sent: %s", exc)
