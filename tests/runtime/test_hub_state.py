"""The look at the hub's state in Ray's GCS is bounded: a CLI waiting on it stays
interruptible and answers "unknown" rather than hang (the GCS query has no deadline)."""

from __future__ import annotations

import time

from rankscope.runtime.client import HUB_STATE_S, hub_state


class _StuckActorId:
    """An actor id whose lookup does not come back for a long time, as a GCS query that hangs."""

    def hex(self) -> str:
        time.sleep(HUB_STATE_S * 5)
        return "00" * 16


class _Handle:
    _actor_id = _StuckActorId()


def test_a_state_look_that_does_not_come_back_is_unknown_within_its_bound():
    started = time.monotonic()
    assert hub_state(_Handle()) is None
    assert time.monotonic() - started < HUB_STATE_S + 1.0
