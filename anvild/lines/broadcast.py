"""`Broadcast`: lines published to every reader, each reader with its own bounded `Cursor`.

A new cursor starts with a copy of the backlog (the last `backlog_lines` lines), then gets every
later line. It holds at most `reader_lines` lines and `reader_bytes` bytes: a line that does not
fit is dropped and counted, and the next line it takes is preceded by one marker
`{"type":"lagged","dropped":N}` where the gap is (a cursor drained while lines were dropped gets
the marker on its own). Loss is never silent, and a slow reader never grows the daemon's memory.
Optional policies: `coalesce` merges a line into the last unread one (nothing is lost), and a
`terminal` line is never the one dropped: the oldest unread lines make room for it instead.
Reads are like a pipe's: `read_nowait` gives whole lines when they fit (a longer line is split),
None when nothing is there, b"" at the end; `await read` waits on a `trio.Event` made only when
a reader waits (a plain cancel point: no task per reader), or `on_ready` registers one callback
that the next publish or close calls (a reader with no task at all). `close` ends the stream.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import ClassVar, Final, TypeAlias

import attrs
import trio

__all__ = [
    "Broadcast",
    "BroadcastStatistics",
    "Coalesce",
    "Cursor",
    "StreamLimits",
    "Terminal",
    "lag_marker",
]

Coalesce: TypeAlias = Callable[[bytes, bytes], bytes | None]
"""Merges a reader's last buffered line with the next one (both with their newline), or None."""
Terminal: TypeAlias = Callable[[bytes], bool]
"""Whether a line (with its newline) must reach every reader: it is never the one dropped."""

_LAGGED: Final = b'{"type":"lagged","dropped":%d}\n'


def lag_marker(dropped: int) -> bytes:
    """The line a reader gets in place of `dropped` lines it was too slow to take."""
    return _LAGGED % dropped


def _lost_in(line: bytes) -> int:
    """How many published lines a buffered line stands for (a marker: its count)."""
    if line.startswith(b'{"type":"lagged","dropped":'):
        try:
            return int(json.loads(line)["dropped"])
        except (ValueError, KeyError, TypeError):
            return 1
    return 1


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
    """One reader of a `Broadcast`: a bounded buffer of lines not yet read. `close()` it when
    the reader goes away (a clunk)."""

    __slots__ = (
        "_buffered_bytes",
        "_closed",
        "_coalesce",
        "_dropped",
        "_limits",
        "_lines",
        "_owner",
        "_partial",
        "_terminal",
        "_waker",
    )

    def __init__(self, owner: Broadcast) -> None:
        self._owner = owner
        self._limits = owner.limits
        self._coalesce = owner._coalesce
        self._terminal = owner._terminal
        self._lines: deque[bytes] = deque()
        self._buffered_bytes = 0
        self._partial = b""  # the unread rest of a line that a short read split
        self._dropped = 0
        self._closed = False
        self._waker: Callable[[], None] | None = None

    @property
    def dropped(self) -> int:
        """Lines lost and not yet reported by a marker (0 when nothing is pending)."""
        return self._dropped

    @property
    def buffered(self) -> int:
        """Bytes waiting to be read, markers not yet queued excluded."""
        return self._buffered_bytes + len(self._partial)

    def ready(self) -> bool:
        """Whether a read would return at once: lines (or a lag marker) to give, or the end."""
        return bool(self._partial or self._lines or self._dropped or self._closed)

    def on_ready(self, wake: Callable[[], None] | None) -> bool:
        """Have `wake()` called once, by the next publish or close (which make this cursor
        `ready`): a plain call from the publisher's task, so `wake` only takes note and returns.
        False, with nothing registered, when a read would return at once already or another
        callback is registered; `None` forgets the registered one."""
        if wake is None:
            self._waker = None
            return True
        if self._waker is not None or self.ready():
            return False
        self._waker = wake
        return True

    def _woken(self) -> None:
        waker = self._waker
        if waker is not None:
            self._waker = None
            waker()

    def _fits(self, size: int, lines: int) -> bool:
        return (
            len(self._lines) + lines <= self._limits.reader_lines
            and self._buffered_bytes + size <= self._limits.reader_bytes
        )

    def _append(self, line: bytes) -> None:
        self._lines.append(line)
        self._buffered_bytes += len(line)

    def _push(self, line: bytes) -> None:
        if self._coalesce is not None and self._lines and not self._dropped:
            last = self._lines[-1]
            merged = self._coalesce(last, line)
            if merged is not None and self._fits(len(merged) - len(last), 0):
                self._buffered_bytes += len(merged) - len(last)
                self._lines[-1] = merged
                return
        if self._terminal is not None and self._terminal(line):
            self._push_terminal(line)
            return
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

    def _push_terminal(self, line: bytes) -> None:
        """Append `line` (after the marker of lines dropped just before it), making room by
        dropping the oldest unread lines; a marker at the front counts them. A line larger than
        the whole buffer is still kept, alone."""
        before = lag_marker(self._dropped) if self._dropped else b""
        self._dropped = 0
        evicted = 0

        def fits() -> bool:
            front = lag_marker(evicted) if evicted else b""
            size = len(front) + len(before) + len(line)
            return self._fits(size, 1 + bool(front) + bool(before))

        while self._lines and not fits():
            old = self._lines.popleft()
            self._buffered_bytes -= len(old)
            evicted += _lost_in(old)
        if evicted and not self._lines and before:  # one gap: one marker
            before, evicted = lag_marker(evicted + _lost_in(before)), 0
        if evicted:
            marker = lag_marker(evicted)
            self._lines.appendleft(marker)
            self._buffered_bytes += len(marker)
        if before:
            self._append(before)
        self._append(line)

    def read_nowait(self, count: int) -> bytes | None:
        """Up to `count` bytes; b"" at end of stream; None when nothing is there yet."""
        if count <= 0:
            return b""
        if not self._partial and not self._lines and self._dropped:
            # Drained while lines were being dropped: the marker comes now, on its own.
            self._append(lag_marker(self._dropped))
            self._dropped = 0
        if not self._partial and not self._lines:
            return b"" if self._closed else None
        out = bytearray(self._partial[:count])
        self._partial = self._partial[count:]
        while self._lines and len(out) < count:
            room = count - len(out)
            if len(self._lines[0]) > room and out:
                break  # keep lines whole when they fit in a later read
            line = self._lines.popleft()
            self._buffered_bytes -= len(line)
            out += line[:room]
            self._partial = line[room:]  # only a line longer than the whole read is split
        return bytes(out)

    async def read(self, count: int) -> bytes:
        """Up to `count` bytes, waiting until there are some; b"" at end of stream."""
        while True:
            changed = self._owner._event()  # taken before the check: no wakeup is missed
            data = self.read_nowait(count)
            if data is not None:
                return data
            await changed.wait()

    def close(self) -> None:
        """Leave the stream; a read still waiting on this cursor returns end-of-file."""
        self._owner.unsubscribe(self)
        self._closed = True
        self._owner._wake()
        self._woken()


class Broadcast:
    """Lines published to every subscribed cursor, with a bounded backlog for new ones."""

    IGNORE_AFTER_CLOSE: ClassVar[bool] = False
    """Whether a publish after `close` is dropped silently rather than refused."""

    def __init__(
        self,
        limits: StreamLimits | None = None,
        *,
        coalesce: Coalesce | None = None,
        terminal: Terminal | None = None,
    ) -> None:
        self._limits = limits or StreamLimits()
        self._coalesce = coalesce
        self._terminal = terminal
        self._backlog: deque[bytes] = deque(maxlen=self._limits.backlog_lines)
        self._cursors: dict[Cursor, None] = {}  # insertion-ordered set
        self._published = 0
        self._closed = False
        # Made when a reader is about to wait, so a publish nobody waits for makes no Event.
        self._changed: trio.Event | None = None

    @property
    def limits(self) -> StreamLimits:
        return self._limits

    @property
    def closed(self) -> bool:
        return self._closed

    def _event(self) -> trio.Event:
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def publish(self, line: str | bytes) -> None:
        """Append one line (a trailing newline is added when missing) and fan it out."""
        if self._closed:
            if self.IGNORE_AFTER_CLOSE:
                return
            raise RuntimeError("publish on a closed stream")
        if isinstance(line, str):
            data = line.removesuffix("\n").encode("utf-8", "surrogateescape")
        else:
            data = bytes(line).removesuffix(b"\n")
        if b"\n" in data:
            raise ValueError("a stream line must not contain a newline; publish one line per call")
        data += b"\n"
        self._backlog.append(data)
        self._published += 1
        for cursor in self._cursors:
            cursor._push(data)
            if cursor._waker is not None:
                cursor._woken()
        self._wake()

    def subscribe(self, *, backlog: bool = True) -> Cursor:
        """A new cursor that starts with the backlog (unless `backlog` is False)."""
        cursor = Cursor(self)
        if backlog:
            for line in self._backlog:
                cursor._push(line)
        if self._closed:
            cursor._closed = True
        else:
            self._cursors[cursor] = None
        return cursor

    def unsubscribe(self, cursor: Cursor) -> None:
        """Forget `cursor`; harmless if it is already gone."""
        self._cursors.pop(cursor, None)

    def backlog(self) -> tuple[str, ...]:
        """The lines a new cursor would start with (for snapshots and tests)."""
        return tuple(line[:-1].decode("utf-8", "surrogateescape") for line in self._backlog)

    def close(self) -> None:
        """End the stream: every cursor reads what it holds, then end-of-file."""
        self._closed = True
        cursors = list(self._cursors)
        self._cursors.clear()
        for cursor in cursors:
            cursor._closed = True
            cursor._woken()
        self._wake()

    def statistics(self) -> BroadcastStatistics:
        return BroadcastStatistics(
            readers=len(self._cursors),
            backlog_lines=len(self._backlog),
            published=self._published,
            closed=self._closed,
        )
