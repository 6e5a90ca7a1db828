"""What a session unloaded for idleness keeps that its records cannot rebuild: `Kept`.

Its `log` and `events` backlogs (a restart rebuilds `log` from the transcript and `events`
empty), the context its SessionStart hooks added for the next prompt (an unload is no start:
they do not run again) and how many prompts it handled (a `wait` opened before the unload
counts on). `shelve` packs it (zlib) for the session's file as it is at the unload (its seq and
size): kept in memory up to `IN_MEMORY` bytes, else spilled to `<id>.kept` beside the records
(written atomically). `Shelved.take` hands it back only while the records are unchanged, and
deletes a spilled file; a file left by a crash is stale (`remove_stale` at the start), so a
session rebuilt after a restart is as a restart has always made it. Blocking: run in a thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Final

import attrs

from anvild.store.durable import replace_durably
from anvild.store.journal import FILE_MODE

IN_MEMORY: Final = 8 << 10
"""The largest packed `Kept` held in memory (bytes); a larger one is spilled to a file."""
SUFFIX: Final = ".kept"


@attrs.frozen
class Kept:
    log: tuple[str, ...]
    events: tuple[str, ...]
    start_context: str
    handled: int


@attrs.frozen
class Shelved:
    """A packed `Kept` for a session file at `seq` and `size`: `data`, or spilled to `path`."""

    seq: int
    size: int
    data: bytes | None = None
    path: Path | None = None

    def take(self, seq: int, size: int) -> Kept | None:
        """The `Kept` if the records are still at `seq` and `size` and it can be read, else
        None (the session is rebuilt as at a restart); a spilled file is deleted either way."""
        data = self.data
        if self.path is not None:
            try:
                data = self.path.read_bytes()
            except OSError:
                data = None
            discard(self.path)
        if data is None or (seq, size) != (self.seq, self.size):
            return None
        try:
            log, events, context, handled = json.loads(zlib.decompress(data))
            return Kept(tuple(log), tuple(events), str(context), int(handled))
        except (ValueError, TypeError, zlib.error):
            return None

    def drop(self) -> None:
        """Forget it (the session ended or was removed): its spilled file is deleted."""
        if self.path is not None:
            discard(self.path)


def shelve(kept: Kept, directory: Path, session_id: str, seq: int, size: int) -> Shelved:
    """`kept` packed for a session file at `seq` and `size`; spilled if over `IN_MEMORY`. A
    spill that fails keeps it in memory (memory over a wrong answer)."""
    text = json.dumps([kept.log, kept.events, kept.start_context, kept.handled])
    data = zlib.compress(text.encode("utf-8", "surrogatepass"), 6)
    if len(data) <= IN_MEMORY:
        return Shelved(seq, size, data=data)
    path = directory / f"{session_id}{SUFFIX}"
    try:
        replace_durably(path, data, temp=path.with_name(path.name + ".tmp"), mode=FILE_MODE)
    except OSError:
        return Shelved(seq, size, data=data)
    return Shelved(seq, size, path=path)


def discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def remove_stale(directory: Path) -> None:
    """Delete every spilled file (and temp file) in `directory`: at a start, none belongs to a
    session."""
    try:
        paths = [p for p in directory.iterdir() if p.name.endswith((SUFFIX, SUFFIX + ".tmp"))]
    except OSError:
        return
    for path in paths:
        discard(path)
