"""A sans-IO, size-bounded decoder for `text/event-stream` (WHATWG HTML section 9.2.6).

    decoder = SseDecoder()
    for event in decoder.push(chunk): ...
    decoder.finish()        # always []: an event without its blank line is discarded

Follows the specification: one leading BOM stripped (even split); CRLF, LF or lone CR line ends
(a CR ending a chunk may pair with the next LF); comments, fields, `data` joined by LF; the event
type resets per event, the last id persists (an id with NUL ignored); an incomplete event at the
end is never dispatched. Only complete events are decoded from UTF-8 (a split character is never
cut). Input beyond `max_event_bytes` or `max_line_bytes` raises `DecodeError` instead of
buffering: a hostile server cannot make the client allocate without bound. Per-byte work is in C.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from anvild.llm.errors import DecodeError

_BOM: Final = b"\xef\xbb\xbf"

DEFAULT_MAX_LINE_BYTES: Final = 4 * 1024 * 1024
DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


class SseEvent(NamedTuple):
    """One dispatched event. `event` is the type ("message" unless the stream named one); `id`
    is the last event id seen so far in the stream, or None."""

    event: str
    data: str
    id: str | None = None


class SseDecoder:
    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if max_line_bytes <= 0 or max_event_bytes <= 0:
            raise ValueError("SSE size limits must be positive")
        self.max_line_bytes = max_line_bytes
        self.max_event_bytes = max_event_bytes
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None  # the stream's `retry:` advice, for callers that care
        self._pending: list[bytes] = []  # normalised bytes of the incomplete event
        self._pending_len = 0
        self._pending_ends_lf = False
        self._cr_at_end = False  # the previous chunk ended in CR (maybe half of a CRLF)
        self._bom_state: bytes | None = b""  # bytes seen while deciding on a BOM; None: decided
        self._finished = False
        self.discarded_bytes = 0  # set by finish(): bytes of an unterminated event dropped

    def push(self, chunk: bytes) -> list[SseEvent]:
        """Feed the next bytes of the body; return the events they complete."""
        if self._finished:
            raise DecodeError("SseDecoder.push() after finish()")
        if self._bom_state is not None:
            chunk = self._strip_bom(chunk)
        if not chunk:
            return []
        if self._cr_at_end and chunk[0] == 0x0A:
            chunk = chunk[1:]
        self._cr_at_end = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not chunk:
            return []

        end = chunk.rfind(b"\n\n")
        if end >= 0:
            cut = end + 2
        elif self._pending_ends_lf and chunk[0] == 0x0A:
            cut = 1  # the blank line completes an event whose last line ended the last chunk
        else:
            self._buffer(chunk)
            return []

        head, rest = chunk[:cut], chunk[cut:]
        if self._pending:
            self._pending.append(head)
            complete = b"".join(self._pending)
        else:
            complete = head
        self._pending = []
        self._pending_len = 0
        self._pending_ends_lf = False
        if rest:
            self._buffer(rest)
        if len(complete) > self.max_line_bytes:
            self._check_complete(complete)
        return self._parse(complete.decode("utf-8", "replace"))

    def finish(self) -> list[SseEvent]:
        """End of input. An incomplete event is discarded (WHATWG), so this returns no events;
        `discarded_bytes` tells how much was dropped."""
        self._finished = True
        self.discarded_bytes = self._pending_len
        self._pending = []
        self._pending_len = 0
        return []

    # -- internals -----------------------------------------------------------------------------

    def _strip_bom(self, chunk: bytes) -> bytes:
        assert self._bom_state is not None
        seen = self._bom_state + chunk
        if len(seen) < len(_BOM) and _BOM.startswith(seen):
            self._bom_state = seen  # too early to tell; hold these bytes back
            return b""
        self._bom_state = None
        return seen[len(_BOM) :] if seen.startswith(_BOM) else seen

    def _buffer(self, data: bytes) -> None:
        new_len = self._pending_len + len(data)
        if new_len > self.max_event_bytes:
            raise DecodeError(
                f"server-sent event exceeds {self.max_event_bytes} bytes without ending; "
                "raise max_event_bytes if this provider really sends events this large"
            )
        line_start = data.rfind(b"\n") + 1
        if line_start == 0:
            # The incomplete last line spans earlier chunks too: measure all of it.
            tail = 0
            for part in reversed(self._pending):
                cut = part.rfind(b"\n")
                tail += len(part) - cut - 1
                if cut >= 0:
                    break
            line_len = tail + len(data)
        else:
            line_len = len(data) - line_start
        if line_len > self.max_line_bytes:
            raise DecodeError(
                f"server-sent event line exceeds {self.max_line_bytes} bytes; "
                "raise max_line_bytes if this provider really sends lines this long"
            )
        self._pending.append(data)
        self._pending_len = new_len
        self._pending_ends_lf = data.endswith(b"\n")

    def _check_complete(self, complete: bytes) -> None:
        """Size checks for complete events that arrived inside one push (rare: only called when
        the region is larger than a line may be)."""
        for line in complete.split(b"\n"):
            if len(line) > self.max_line_bytes:
                raise DecodeError(
                    f"server-sent event line exceeds {self.max_line_bytes} bytes; "
                    "raise max_line_bytes if this provider really sends lines this long"
                )
        if len(complete) > self.max_event_bytes:
            for block in complete.split(b"\n\n"):
                if len(block) > self.max_event_bytes:
                    raise DecodeError(
                        f"server-sent event exceeds {self.max_event_bytes} bytes; "
                        "raise max_event_bytes if this provider really sends events this large"
                    )

    def _parse(self, text: str) -> list[SseEvent]:
        # One pass over the lines of complete events. `text` ends with "\n\n", so the split ends
        # with two empty strings: the blank line that dispatches the last event, and nothing.
        events: list[SseEvent] = []
        append = events.append
        last_id = self.last_event_id
        data: str | None = None
        event_type = ""
        for line in text.split("\n"):
            if not line:  # blank line: dispatch
                if data is not None:
                    append(SseEvent(event_type or "message", data, last_id))
                    data = None
                event_type = ""
                continue
            if line.startswith("data: "):  # the common case, in one step
                data = line[6:] if data is None else f"{data}\n{line[6:]}"
                continue
            if line.startswith("event: "):
                event_type = line[7:]
                continue
            if line[0] == ":":
                continue  # comment
            colon = line.find(":")
            if colon < 0:
                name, value = line, ""
            else:
                name = line[:colon]
                value = line[colon + 1 :]
                if value and value[0] == " ":
                    value = value[1:]
            if name == "data":
                data = value if data is None else f"{data}\n{value}"
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\x00" not in value:
                    last_id = value
            elif name == "retry" and value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        self.last_event_id = last_id
        return events
