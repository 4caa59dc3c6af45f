"""POSTing alerts to a webhook from a daemon thread: a slow or dead endpoint never blocks the
probe or the training thread; what does not fit in the queue is counted, not kept."""

from __future__ import annotations

import json
import queue
import threading
import urllib.request
from typing import Any

__all__ = ["WebhookSender", "payload_for", "post_json"]

QUEUE_SIZE = 256
TIMEOUT_S = 5.0


def payload_for(alert: dict[str, Any]) -> dict[str, Any]:
    """The JSON body: the alert's fields, plus `text` (what Slack-style webhooks display)."""
    return {"text": f"rankscope [{alert.get('severity')}] {alert.get('message')}", **alert}


def post_json(url: str, body: dict[str, Any], timeout: float = TIMEOUT_S) -> int:
    data = json.dumps(body, default=str).encode("utf-8")
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(response.status)


class WebhookSender:
    """One thread per process, started on the first alert."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue(maxsize=QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        self.failed = 0
        self.sent = 0

    def send(self, url: str, alert: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait((url, payload_for(alert)))
        except queue.Full:
            self.dropped += 1
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="rankscope-webhook", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while True:
            url, body = self._queue.get()
            try:
                post_json(url, body)
                self.sent += 1
            except Exception:
                self.failed += 1
