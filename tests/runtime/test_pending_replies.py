"""A fan-out waits for the probes that can still answer: a probe proven dead meanwhile ends its
questions at once, and the others' answers are kept (no Ray)."""

from __future__ import annotations

import asyncio
import time

from rankscope.runtime.mailbox import Mailbox, PendingReplies
from rankscope.runtime.protocol import CommandResult


def test_a_probe_proven_dead_ends_the_wait_for_it_and_the_answers_stay():
    async def scenario() -> tuple[dict[str, CommandResult], float]:
        replies = PendingReplies()
        boxes = {p: Mailbox(capacity=4) for p in ("alive", "dead")}
        started = time.monotonic()
        asking = asyncio.ensure_future(replies.ask(list(boxes.items()), "stacks", None, 30.0))
        await asyncio.sleep(0.05)
        [command] = boxes["alive"].take()
        replies.resolve(command.id, CommandResult("alive", True, {"ok": 1}))
        replies.give_up_on("dead")  # the hub marked it dead
        answers = await asking
        return answers, time.monotonic() - started

    answers, took = asyncio.run(scenario())
    assert list(answers) == ["alive"] and answers["alive"].payload == {"ok": 1}
    assert took < 10  # not the 30 s deadline
