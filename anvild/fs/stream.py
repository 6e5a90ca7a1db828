"""`LineStream`: a blocking stream file's lines (`events`, `log`), one `StreamReader` per open.

The lines, the per-reader bounds, the lag markers and the pipe-like reads are the one
broadcaster's (`anvild.lines.broadcast`, shared with the session's streams); this module adds
what a file needs: the time of the last line (the file's mtime) and a reader per open, closed at
clunk. A read that finds nothing waits on a plain cancel point, so a Tflush or a clunk releases
it, and nothing stays behind: no task per reader, and a closed reader is unreachable.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from anvild.lines.broadcast import (
    Broadcast,
    BroadcastStatistics,
    Cursor,
    StreamLimits,
    lag_marker,
)

__all__ = [
    "Broadcast",
    "BroadcastStatistics",
    "Cursor",
    "LineStream",
    "StreamLimits",
    "StreamReader",
    "lag_marker",
]


class LineStream:
    """A `Broadcast` that remembers when it last published (a stream file's mtime)."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self._core = Broadcast(limits)
        self._last_publish_ns = 0

    @property
    def last_publish_ns(self) -> int:
        """Wall-clock time of the last publish (0 before the first), for stat's mtime."""
        return self._last_publish_ns

    @property
    def core(self) -> Broadcast:
        return self._core

    def publish(self, line: str | bytes) -> None:
        self._core.publish(line)
        self._last_publish_ns = time.time_ns()

    def close(self) -> None:
        self._core.close()

    def open_reader(self, *, backlog: bool = True) -> StreamReader:
        return StreamReader(self._core.subscribe(backlog=backlog))

    def statistics(self) -> BroadcastStatistics:
        return self._core.statistics()


class StreamReader:
    """One open of a stream file. `close()` it when the fid is clunked."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor

    @property
    def cursor(self) -> Cursor:
        return self._cursor

    def read_nowait(self, count: int) -> bytes | None:
        return self._cursor.read_nowait(count)

    def on_ready(self, wake: Callable[[], None] | None) -> bool:
        """`wake()` once the next line or the end comes (`Cursor.on_ready`)."""
        return self._cursor.on_ready(wake)

    async def read(self, count: int) -> bytes:
        """Up to `count` bytes, waiting until there are some; b"" at end of stream."""
        return await self._cursor.read(count)

    def close(self) -> None:
        """Leave the stream; a read still waiting on this reader returns end-of-file."""
        self._cursor.close()
