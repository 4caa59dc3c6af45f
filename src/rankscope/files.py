"""Writing the files users open (reports, traces): whole or not at all, and private.

A reader (a browser, a second `rankscope` command, a crash halfway) never sees half a file:
the text goes to a temporary file beside the destination, which is then renamed over it.
Files rankscope writes on its own (events, logs, hang and OOM reports) hold stacks, arguments
and log lines: they are the job's user's only (`FILE_MODE` in `private_dirs`).
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["DIR_MODE", "FILE_MODE", "private_dirs", "write_text_atomically"]

DIR_MODE = 0o700
FILE_MODE = 0o600
"""Run-directory and log files hold stacks, arguments and logs: the job's user only."""


def private_dirs(folder: str) -> str:
    """Create `folder` and its missing parents readable by this user only (folders that exist
    are left as they are: they may be shared, like Ray's logs folder); returns `folder`."""
    missing = []
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:  # another process made it meanwhile
            continue
        os.chmod(path, DIR_MODE)  # mkdir's mode is filtered by the umask
    return folder


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
