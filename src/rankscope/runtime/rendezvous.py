"""Gathering small payloads across processes that share no torch.distributed group.

Trainer and rollout workers in RL jobs are separate Ray actors with no common process group;
features that compare them (tensor consistency, for one) meet at the hub instead.
"""

from __future__ import annotations

from typing import Any

from rankscope.config import Config
from rankscope.runtime.protocol import ExchangeResult

HUB_SLACK_S = 30.0
"""Extra time allowed for the hub call itself beyond the rendezvous deadline."""


def exchange(
    key: str, participant: int, payload: Any, expected: list[int], *, deadline_s: float
) -> ExchangeResult:
    """Send `payload` as `participant` under `key`; get every participant's payload back.

    Example: `exchange("sync-42", rank, fingerprints, [0, 1, 2, 3], deadline_s=30)`.
    The hub is started if missing, so this works before any probe registered.
    """
    import ray

    from rankscope.runtime.hub import get_or_create_hub

    hub = get_or_create_hub(Config.from_env())
    ref = hub.exchange.remote(key, participant, payload, list(expected), deadline_s)
    result: ExchangeResult = ray.get(ref, timeout=deadline_s + HUB_SLACK_S)
    return result
