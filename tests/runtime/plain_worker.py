"""A worker whose code never imports rankscope: the probe comes from the setup hook."""

from __future__ import annotations

import os
import sys


class PlainWorker:
    def pid(self) -> int:
        return os.getpid()

    def imported_by_hook(self) -> bool:
        return "rankscope" in sys.modules
