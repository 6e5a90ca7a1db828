"""`LineBroadcast`: a session's `log` and `events` streams, with a cursor per reader.

Each `open_reader()` gets its own `LineReader`: a copy of the bounded backlog, then every later
line. A reader holds at most `reader_lines` lines / `reader_bytes` bytes; a line that does not
fit is dropped and the next one taken is preceded by `{"type":"lagged","dropped":N}` where the
gap is. Loss is never silent and memory never unbounded. Lines marked `terminal=` (a turn's
`turn_finished`) are never the ones lost: the oldest unread lines go instead.
Reads behave like a pipe: `read_nowait` returns bytes, None (nothing yet) or b"" (EOF);
`await read` is a plain cancel point (Tflush, clunk). `close()` ends the stream.
Mirrors `anvild.fs.stream` on purpose: the session layer may not import fs.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Final, TypeAlias

import attrs
import trio

from anvild.agent import events as ev

LAGGED: Final = b'{"type":"lagged","dropped":%d}\n'


Coalesce: TypeAlias = Callable[[bytes, bytes], bytes | None]
"""Merges a reader's last buffered line with the next one (both with their newline), or None."""
Terminal: TypeAlias = Callable[[bytes], bool]
"""Whether a line (with its newline) must reach every reader: it is never the one dropped."""


def is_turn_finished(line: bytes) -> bool:
    """For agent-event streams: the `turn_finished` line that ends every turn."""
    return line.startswith(b'{"type":"turn_finished"')


def lag_marker(dropped: int) -> bytes:
    return LAGGED % dropped


def event_line(event: ev.AgentEvent) -> str:
    """`anvild.agent.events.to_json(event)`, with text deltas (most of a turn's events) written
    directly: the same bytes without the converter's dict, a sixth of the cost."""
    if type(event) is ev.TextDelta:
        text = json.dumps(event.text, ensure_ascii=False)
        return f'{{"type":"text_delta","step":{event.step:d},"text":{text}}}'
    return ev.to_json(event)


_DELTA_PREFIX: Final = b'{"type":"text_delta",'
_DELTA_TEXT: Final = b',"text":"'
_DELTA_END: Final = b'"}\n'


def coalesce_text_deltas(last: bytes, line: bytes) -> bytes | None:
    """For agent-event streams: two adjacent `text_delta` lines of the same step that a reader
    has not read yet become one, so a slow reader falls behind later and loses nothing.

    This runs for every line published while a reader is behind, and the line it grows is as
    long as everything the reader has not read, so it must not cost more than a copy: the
    lines `anvild.agent.events.to_json` writes, `{"type":"text_delta","step":N,"text":"..."}`,
    are spliced as bytes (a JSON string's escapes are per character, so the escaped text of
    two pieces is the escaped text of both). Parsing both lines each time made a reader that
    fell behind cost the daemon time in proportion to how far behind it was. Any other shape
    of delta line is merged through JSON."""
    if not (last.startswith(_DELTA_PREFIX) and line.startswith(_DELTA_PREFIX)):
        return None
    head = line.find(_DELTA_TEXT, len(_DELTA_PREFIX)) + len(_DELTA_TEXT)
    if (
        head > len(_DELTA_TEXT)
        and last[:head] == line[:head]  # the same step, and the text is the last key
        and line[len(_DELTA_PREFIX) : head].startswith(b'"step":')
        and line[len(_DELTA_PREFIX) : head - len(_DELTA_TEXT)][7:].isdigit()
        and last.endswith(_DELTA_END)
        and line.endswith(_DELTA_END)
    ):
        return last[: -len(_DELTA_END)] + line[head:]
    first, second = json.loads(last), json.loads(line)
    if first.get("step") != second.get("step"):
        return None
    first["text"] = str(first.get("text", "")) + str(second.get("text", ""))
    text = json.dumps(first, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogateescape") + b"\n"


@attrs.frozen
class BroadcastLimits:
    backlog_lines: int = 200
    reader_lines: int = 1024
    reader_bytes: int = 1 << 20


@attrs.frozen
class BroadcastStatistics:
    readers: int
    backlog_lines: int
    published: int
    closed: bool


def _lost_in(line: bytes) -> int:
    """How many published lines a buffered line stands for (a marker: its count)."""
    if line.startswith(b'{"type":"lagged","dropped":'):
        try:
            return int(json.loads(line)["dropped"])
        except (ValueError, KeyError, TypeError):
            return 1
    return 1


class LineReader:
    """One open of a stream: a bounded buffer of lines not yet read."""

    def __init__(self, owner: LineBroadcast, limits: BroadcastLimits) -> None:
        self._owner = owner
        self._limits = limits
        self._lines: deque[bytes] = deque()
        self._bytes = 0
        self._partial = b""
        self._dropped = 0
        self._closed = False

    @property
    def dropped(self) -> int:
        """Lines lost and not yet reported by a marker."""
        return self._dropped

    def ready(self) -> bool:
        """Whether a read would return at once: lines (or a lag marker) to give, or the end."""
        return bool(self._partial or self._lines or self._dropped or self._closed)

    def _fits(self, size: int, lines: int) -> bool:
        return (
            len(self._lines) + lines <= self._limits.reader_lines
            and self._bytes + size <= self._limits.reader_bytes
        )

    def _append(self, line: bytes) -> None:
        self._lines.append(line)
        self._bytes += len(line)

    def _push(self, line: bytes) -> None:
        merge = self._owner._coalesce
        if merge is not None and self._lines and not self._dropped:
            merged = merge(self._lines[-1], line)
            if merged is not None and self._fits(len(merged) - len(self._lines[-1]), 0):
                self._bytes += len(merged) - len(self._lines[-1])
                self._lines[-1] = merged
                return
        terminal = self._owner._terminal
        if terminal is not None and terminal(line):
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
        dropping the oldest unread lines; a marker at the front counts them."""
        before = lag_marker(self._dropped) if self._dropped else b""
        self._dropped = 0
        evicted = 0

        def fits() -> bool:
            front = lag_marker(evicted) if evicted else b""
            size = len(front) + len(before) + len(line)
            return self._fits(size, 1 + bool(front) + bool(before))

        while self._lines and not fits():
            old = self._lines.popleft()
            self._bytes -= len(old)
            evicted += _lost_in(old)
        if evicted and not self._lines and before:  # one gap: one marker
            before, evicted = lag_marker(evicted + _lost_in(before)), 0
        if evicted:
            marker = lag_marker(evicted)
            self._lines.appendleft(marker)
            self._bytes += len(marker)
        if before:
            self._append(before)
        self._append(line)

    def read_nowait(self, count: int) -> bytes | None:
        """Up to `count` bytes; b"" at end of stream; None when nothing is there yet."""
        if count <= 0:
            return b""
        if not self._partial and not self._lines and self._dropped:
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
            self._bytes -= len(line)
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
        """Leave the stream (the fid was clunked); a pending read returns end-of-file."""
        self._owner._readers.pop(self, None)
        self._closed = True
        self._owner._wake()


class LineBroadcast:
    """Lines published to every reader, with a bounded backlog for new readers."""

    def __init__(
        self,
        limits: BroadcastLimits | None = None,
        *,
        coalesce: Coalesce | None = None,
        terminal: Terminal | None = None,
    ) -> None:
        self._limits = limits or BroadcastLimits()
        self._coalesce = coalesce
        self._terminal = terminal
        self._backlog: deque[bytes] = deque(maxlen=self._limits.backlog_lines)
        self._readers: dict[LineReader, None] = {}
        self._published = 0
        self._closed = False
        # Made when a reader is about to wait, so a publish nobody waits for (every reader
        # is behind, or there is none) makes no Event.
        self._changed: trio.Event | None = None

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

    def publish(self, line: str) -> None:
        """One line (no newline inside; one is added). Ignored once the stream is closed."""
        if self._closed:
            return
        data = line.removesuffix("\n").encode("utf-8", "surrogateescape")
        if b"\n" in data:
            raise ValueError("a stream line must not contain a newline")
        data += b"\n"
        self._backlog.append(data)
        self._published += 1
        for reader in self._readers:
            reader._push(data)
        self._wake()

    def open_reader(self, *, backlog: bool = True) -> LineReader:
        reader = LineReader(self, self._limits)
        if backlog:
            for line in self._backlog:
                reader._push(line)
        if self._closed:
            reader._closed = True
        else:
            self._readers[reader] = None
        return reader

    def backlog(self) -> tuple[str, ...]:
        """The lines a new reader would start with (for snapshots and tests)."""
        return tuple(line[:-1].decode("utf-8", "surrogateescape") for line in self._backlog)

    def close(self) -> None:
        self._closed = True
        for reader in self._readers:
            reader._closed = True
        self._readers.clear()
        self._wake()

    def statistics(self) -> BroadcastStatistics:
        return BroadcastStatistics(
            len(self._readers), len(self._backlog), self._published, self._closed
        )


__all__ = [
    "BroadcastLimits",
    "BroadcastStatistics",
    "Coalesce",
    "LineBroadcast",
    "LineReader",
    "Terminal",
    "coalesce_text_deltas",
    "event_line",
    "is_turn_finished",
    "lag_marker",
]
