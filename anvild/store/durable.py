"""Replacing a small file whole, so that a crash leaves the old content or the new, never part.

`replace_durably` writes the bytes to a temp file beside the target (all of them, a short write
continues), fsyncs it, renames it over the target and fsyncs the directory, so the rename itself
survives a power loss. The caller names the temp file (readers of the directory skip its own
temp names) and its mode; a failure removes the temp file and raises the `OSError`. Blocking:
call it in a thread from trio code. Used by the session index, the mailboxes and the beads.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from anvild.store.journal import sync_directory

__all__ = ["replace_durably"]


def replace_durably(path: Path, data: bytes, *, temp: Path, mode: int) -> None:
    """Make `path` hold `data` (written to `temp` in its directory, created with `mode`)."""
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    sync_directory(path.parent)
