"""Line broadcast with per-reader cursors: the core of every blocking stream file.

`Broadcast` (pure, synchronous): producers `publish()` lines; each open `subscribe()`s and gets a
`Cursor` starting with a copy of the bounded backlog. A cursor holds at most `reader_lines` lines
and `reader_bytes` bytes: a line that does not fit is dropped and counted, and the next accepted
line is preceded by `{"type":"lagged","dropped":N}` exactly where the gap is (a reader that
drains everything gets the marker alone). Loss is never silent, memory never unbounded.
Reads are like a pipe's: the offset is ignored; whole lines when they fit, a line longer than the
count split across reads. `close()` ends the stream after what cursors hold. `LineStream` adds
the wait: a reader that finds nothing awaits a `trio.Event` (a plain cancel point for Tflush and
clunk; no task per reader).
"""

from __future__ import annotations

import time
from collections import deque

import attrs
import trio

__all__ = [
    "Broadcast",
    "BroadcastStatistics",
    "Cursor",
    "LineStream",
    "StreamLimits",
    "StreamReader",
    "lag_marker",
]


def lag_marker(dropped: int) -> bytes:
    """The line a reader gets in place of `dropped` lines it was too slow to take."""
    return b'{"type":"lagged","dropped":%d}\n' % dropped


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


@attrs.frozen
class StreamLimits:
    """Bounds of one stream: the backlog a new reader starts with, and each reader's buffer."""

    backlog_lines: int = attrs.field(default=200, validator=_positive)
    reader_lines: int = attrs.field(default=1024, validator=_positive)
    reader_bytes: int = attrs.field(default=1 << 20, validator=_positive)


@attrs.frozen
class BroadcastStatistics:
    readers: int
    backlog_lines: int
    published: int
    closed: bool


class Cursor:
    """One reader's position in a `Broadcast`: a bounded buffer of lines not yet read."""

    __slots__ = ("_buffered_bytes", "_closed", "_dropped", "_limits", "_lines", "_partial")

    def __init__(self, limits: StreamLimits) -> None:
        self._limits = limits
        self._lines: deque[bytes] = deque()
        self._buffered_bytes = 0
        self._partial = b""  # the unread rest of a line that a short read split
        self._dropped = 0
        self._closed = False

    @property
    def dropped(self) -> int:
        """Lines lost since the last marker was queued (0 when nothing is pending)."""
        return self._dropped

    @property
    def buffered(self) -> int:
        """Bytes waiting to be read, markers excluded."""
        return self._buffered_bytes + len(self._partial)

    def _fits(self, size: int, lines: int) -> bool:
        return (
            len(self._lines) + lines <= self._limits.reader_lines
            and self._buffered_bytes + size <= self._limits.reader_bytes
        )

    def _push(self, line: bytes) -> None:
        if self._dropped:
            marker = lag_marker(self._dropped)
            if not self._fits(len(marker) + len(line), 2):
                self._dropped += 1
                return
            self._append(marker)
            self._dropped = 0
        if self._fits(len(line), 1):
            self._append(line)
        else:
            self._dropped += 1

    def _append(self, line: bytes) -> None:
        self._lines.append(line)
        self._buffered_bytes += len(line)

    def _close(self) -> None:
        self._closed = True

    def read_nowait(self, count: int) -> bytes | None:
        """Up to `count` bytes; b"" at end of stream; None when nothing is there yet."""
        if count <= 0:
            return b""
        if not self._partial and not self._lines and self._dropped:
            # The reader drained everything while lines were being dropped: tell it now.
            self._append(lag_marker(self._dropped))
            self._dropped = 0
        if not self._partial and not self._lines:
            return b"" if self._closed else None
        out = bytearray()
        if self._partial:
            out += self._partial[:count]
            self._partial = self._partial[count:]
        while self._lines and len(out) < count:
            line = self._lines[0]
            room = count - len(out)
            if len(line) > room:
                if out:
                    break  # keep lines whole when they fit in a later read
                self._lines.popleft()
                self._buffered_bytes -= len(line)
                out += line[:room]
                self._partial = line[room:]
                break
            self._lines.popleft()
            self._buffered_bytes -= len(line)
            out += line
        return bytes(out)


class Broadcast:
    """Lines published to every subscribed cursor, with a bounded backlog for new subscribers."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self._limits = limits or StreamLimits()
        self._backlog: deque[bytes] = deque(maxlen=self._limits.backlog_lines)
        self._cursors: dict[Cursor, None] = {}  # insertion-ordered set
        self._published = 0
        self._closed = False

    @property
    def limits(self) -> StreamLimits:
        return self._limits

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, line: str | bytes) -> None:
        """Append one line (a trailing newline is added when missing) and fan it out."""
        if self._closed:
            raise RuntimeError("publish on a closed stream")
        data = line.encode() if isinstance(line, str) else bytes(line)
        if data.endswith(b"\n"):
            data = data[:-1]
        if b"\n" in data:
            raise ValueError("a stream line must not contain a newline; publish one line per call")
        data += b"\n"
        self._backlog.append(data)
        self._published += 1
        for cursor in self._cursors:
            cursor._push(data)

    def subscribe(self, *, backlog: bool = True) -> Cursor:
        """A new cursor that starts with the backlog (unless `backlog` is False)."""
        cursor = Cursor(self._limits)
        if backlog:
            for line in self._backlog:
                cursor._push(line)
        if self._closed:
            cursor._close()
        else:
            self._cursors[cursor] = None
        return cursor

    def unsubscribe(self, cursor: Cursor) -> None:
        """Forget `cursor`; harmless if it is already gone."""
        self._cursors.pop(cursor, None)

    def close(self) -> None:
        """End the stream: every cursor reads what it holds, then end-of-file."""
        self._closed = True
        for cursor in self._cursors:
            cursor._close()
        self._cursors.clear()

    def statistics(self) -> BroadcastStatistics:
        return BroadcastStatistics(
            readers=len(self._cursors),
            backlog_lines=len(self._backlog),
            published=self._published,
            closed=self._closed,
        )


class LineStream:
    """A `Broadcast` whose readers can wait (trio) for the next line."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self._core = Broadcast(limits)
        self._changed = trio.Event()
        self._last_publish_ns = 0

    @property
    def last_publish_ns(self) -> int:
        """Wall-clock time of the last publish (0 before the first), for stat's mtime."""
        return self._last_publish_ns

    @property
    def core(self) -> Broadcast:
        return self._core

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def publish(self, line: str | bytes) -> None:
        self._core.publish(line)
        self._last_publish_ns = time.time_ns()
        self._wake()

    def close(self) -> None:
        self._core.close()
        self._wake()

    def open_reader(self, *, backlog: bool = True) -> StreamReader:
        return StreamReader(self, self._core.subscribe(backlog=backlog))

    def statistics(self) -> BroadcastStatistics:
        return self._core.statistics()


class StreamReader:
    """One open of a stream file. `close()` it when the fid is clunked."""

    __slots__ = ("_cursor", "_stream")

    def __init__(self, stream: LineStream, cursor: Cursor) -> None:
        self._stream = stream
        self._cursor = cursor

    @property
    def cursor(self) -> Cursor:
        return self._cursor

    def read_nowait(self, count: int) -> bytes | None:
        return self._cursor.read_nowait(count)

    async def read(self, count: int) -> bytes:
        """Up to `count` bytes, waiting until there are some; b"" at end of stream."""
        while True:
            changed = self._stream._changed  # taken before the check, so no wakeup is missed
            data = self._cursor.read_nowait(count)
            if data is not None:
                return data
            await changed.wait()

    def close(self) -> None:
        """Leave the stream; a read still waiting on this reader returns end-of-file."""
        self._stream._core.unsubscribe(self._cursor)
        self._cursor._close()
        self._stream._wake()
