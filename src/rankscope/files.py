"""Writing the files users open (reports, traces): whole or not at all.

A reader (a browser, a second `rankscope` command, a crash halfway) never sees half a file:
the text goes to a temporary file beside the destination, which is then renamed over it.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["write_text_atomically"]


def write_text_atomically(path: str, text: str) -> str:
    """Write `text` to `path` through a temporary file and a rename; returns the absolute path."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
