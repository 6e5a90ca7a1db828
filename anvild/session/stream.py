"""`LineBroadcast`: a session's `log` and `events` streams, with a cursor per reader.

Each `open_reader()` gets its own `LineReader`: a copy of the bounded backlog, then every later
line. A reader holds at most `reader_lines` lines / `reader_bytes` bytes; a line that does not
fit is dropped and the next one taken is preceded by `{"type":"lagged","dropped":N}` where the
gap is. Loss is never silent and memory never unbounded. Lines marked `terminal=` (a turn's
`turn_finished`) are never the ones lost: the oldest unread lines go instead.
Reads behave like a pipe: `read_nowait` returns bytes, None (nothing yet) or b"" (EOF);
`await read` is a plain cancel point (Tflush, clunk). `close()` ends the stream.
The broadcaster is `anvild.lines.broadcast`; here are the agent-event policies.
"""

from __future__ import annotations

import json
from typing import ClassVar, Final

from anvild.agent import events as ev
from anvild.lines.broadcast import (
    Broadcast,
    BroadcastStatistics,
    Coalesce,
    Cursor,
    StreamLimits,
    Terminal,
    lag_marker,
)
from anvild.lines.jsonl import dumps

BroadcastLimits = StreamLimits
"""A session stream's bounds (`anvild.lines.broadcast.StreamLimits`)."""
LineReader = Cursor
"""One open of a session stream (`anvild.lines.broadcast.Cursor`)."""


def is_turn_finished(line: bytes) -> bool:
    """For agent-event streams: the `turn_finished` line that ends every turn."""
    return line.startswith(b'{"type":"turn_finished"')


def event_line(event: ev.AgentEvent) -> str:
    """`anvild.agent.events.to_json(event)`, with text deltas (most of a turn's events) written
    directly: the same bytes without the converter's dict, a sixth of the cost."""
    if type(event) is ev.TextDelta:
        text = dumps(event.text)  # json.dumps(..., ensure_ascii=False) makes an encoder per call
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
    return dumps(first).encode("utf-8", "surrogateescape") + b"\n"


class LineBroadcast(Broadcast):
    """A session's `log` or `events`: a `Broadcast` whose publishes after `close` are dropped
    (a session publishes while it shuts down)."""

    IGNORE_AFTER_CLOSE: ClassVar[bool] = True

    def open_reader(self, *, backlog: bool = True) -> LineReader:
        return self.subscribe(backlog=backlog)


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
