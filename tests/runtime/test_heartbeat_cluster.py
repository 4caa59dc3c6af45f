"""A real heartbeat, with every feature's summary, fits the byte budget they share (issue 20).

Two gloo ranks that do what a trainer does between heartbeats: all_reduce, `rankscope.step()`
with numbers, and log many distinct lines (warnings among them). The hub's copy of their
summaries is measured as it crossed: packed bytes per feature.
"""

from __future__ import annotations

import ray

from helpers.cluster import probes_by_pid, wait_registered
from helpers.workers import GlooRank, form_group, wait_until
from rankscope.runtime.protocol import SUMMARIES_BUDGET_BYTES

TEMPLATES = 60
"""Distinct lines each rank logs: more than fit in the `logs` summary's share."""


class BusyRank(GlooRank):
    def busy(self, steps: int) -> None:
        import rankscope

        log = rankscope.DistributedLogger("busy-rank", aggregation_interval=0.2)
        for i in range(steps):
            self.step_once()
            rankscope.step(loss=1.0 / (i + 1), tokens=512, grad_norm=0.5 + i % 3)
            stage = "abcdefghijklmnopqrstuvwxyz"[i % 26] * (1 + i % TEMPLATES // 26)
            log.info("stage %s of the rollout done: score=%.4f after %d ms", stage, 0.5, i)
            if i % 7 == 0:
                log.warning("slow shard %s: %.1f s behind the others", stage, i / 10)


def test_every_feature_s_summary_together_fits_the_heartbeat_budget(cluster):
    actor = ray.remote(num_cpus=0)(BusyRank)
    ranks = [actor.remote(r, 2, explicit_rank=True) for r in range(2)]
    pids = ray.get([r.pid.remote() for r in ranks], timeout=60)
    wait_registered(pids)
    form_group(ranks)
    ray.get([r.busy.remote(3 * TEMPLATES) for r in ranks], timeout=120)

    def measured() -> dict[int, dict[str, int]] | None:
        found = probes_by_pid(pids)
        logs = [found[p].summaries.get("logs") if p in found else None for p in pids]
        if not all(
            isinstance(s, dict)
            and s.get("more_templates")
            and len(s["templates"]) + s["more_templates"] >= TEMPLATES
            for s in logs
        ):  # a heartbeat built while the lines were logged may arrive after `busy` returned
            return None  # not yet the summary of all the lines
        return {pid: found[pid].summaries.sizes() for pid in pids}

    sizes = wait_until(measured, timeout=30, what="both ranks' logs summaries")
    for pid in pids:
        summaries = probes_by_pid([pid])[pid].summaries
        assert sum(sizes[pid].values()) <= SUMMARIES_BUDGET_BYTES, sizes[pid]
        assert not any(
            isinstance(v, dict) and "over the heartbeat budget" in str(v.get("error"))
            for v in summaries.values()
        ), sizes[pid]  # every feature fits its share: none was left out
        assert summaries["collectives"].records, summaries["collectives"]
        assert summaries["monitor"] is not None
        templates = summaries["logs"]["templates"]
        assert templates[0]["level"] == "WARNING"  # warnings first, then the most frequent
        assert len(templates) + summaries["logs"]["more_templates"] >= TEMPLATES
