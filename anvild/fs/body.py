"""Accumulating the body written on one open of a body file, checking each write as it arrives.

Clients split one logical write into many Twrites (plan9port's `9p write` at 4096 bytes, v9fs at
msize) and many never look at a clunk's reply, so `BodyBuffer` (pure) refuses each write with all
that can be known by then: a gap, the size limit (`BodyTooLarge`, naming the setting), invalid
UTF-8 (an incremental decoder: a character split across two writes is fine) and, by `Framing`,
where the body ends: `WHOLE` bodies end at clunk (`in`, `context`); a `LINE` body is complete at
its first newline (`role`); a `JSON` body when the text forms one JSON value (`outbox`,
`anvild.fs.jsonscan`). `message` is then the complete body; only blanks may follow it, on that
write or later ones ("one message per open").

A write inside what is already there overwrites it, as on a regular file (a retried tail does no
harm); the checks then start again from the first byte. OTRUNC and a length-0 wstat mean "start
from empty", which a fresh buffer already is.
"""

from __future__ import annotations

import codecs
import enum

from anvild.fs.jsonscan import JsonMalformed, JsonScanner

__all__ = [
    "DEFAULT_BODY_LIMIT",
    "BodyBuffer",
    "BodyError",
    "BodyMalformed",
    "BodyNotText",
    "BodyTooLarge",
    "Framing",
    "OneMessagePerOpen",
]

DEFAULT_BODY_LIMIT = 16 << 20
_BLANK = b" \t\r\n"


class BodyError(ValueError):
    """A write that cannot become part of the body; the message is what the writer sees."""


class BodyTooLarge(BodyError):
    """A write that would make the body larger than its limit."""


class BodyNotText(BodyError):
    """A write that makes the body invalid UTF-8."""


class BodyMalformed(BodyError):
    """A write after which the body can no longer be one line or one JSON value."""


class OneMessagePerOpen(BodyError):
    """More than blanks written after the complete message."""


class Framing(enum.Enum):
    """Where a body ends (module docstring)."""

    WHOLE = "whole"
    LINE = "line"
    JSON = "json"


class BodyBuffer:
    """Bytes written on one open, in offset order, up to `limit` bytes. `limit_name` says where
    the limit is set (e.g. `[sessions] max_prompt_bytes in the daemon's config`); `text` checks
    UTF-8 (always on for LINE and JSON); `max_depth` bounds JSON nesting."""

    __slots__ = (
        "_data",
        "_decoder",
        "_framing",
        "_limit",
        "_limit_name",
        "_max_depth",
        "_message",
        "_scanner",
        "_text",
        "_utf8",
        "_writes",
    )

    def __init__(
        self,
        limit: int = DEFAULT_BODY_LIMIT,
        *,
        limit_name: str = "",
        text: bool = False,
        framing: Framing = Framing.WHOLE,
        max_depth: int | None = None,
    ) -> None:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        self._limit = limit
        self._limit_name = limit_name
        self._framing = framing
        self._max_depth = max_depth
        self._utf8 = text or framing is not Framing.WHOLE
        self._data = bytearray()
        self._writes = 0
        self._reset_checks()

    def _reset_checks(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._text = ""  # the decoded text, kept only when the framing reads it
        self._scanner = JsonScanner(max_depth=self._max_depth)
        self._message: bytes | None = None

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def writes(self) -> int:
        """How many writes were accepted (an empty write counts: the writer meant "empty")."""
        return self._writes

    @property
    def message(self) -> bytes | None:
        """The complete line or JSON value (with what followed it on its write), once written."""
        return self._message

    def __len__(self) -> int:
        return len(self._data)

    def write(self, offset: int, data: bytes) -> int:
        """Place `data` at `offset`; returns the count written (always all of it)."""
        end = offset + len(data)
        if offset < 0:
            raise BodyError(f"negative write offset {offset}")
        if offset > len(self._data):
            raise BodyError(
                f"write at offset {offset} leaves a gap after the {len(self._data)} bytes "
                "written so far; write the body sequentially"
            )
        if end > self._limit:
            where = f" ({self._limit_name})" if self._limit_name else ""
            raise BodyTooLarge(
                f"body too large: {end} bytes exceeds the limit of {self._limit} bytes{where}; "
                "send a shorter text or put it in a file and send its path"
            )
        message = self._message
        if message is not None:
            if data[max(0, len(message) - offset) :].strip(_BLANK):
                raise OneMessagePerOpen(
                    "one message per open: the message written before is complete (and was "
                    "taken); open the file again to write another"
                )
            self._data[offset:end] = data  # blanks after the message: kept, harmless
        elif offset == len(self._data):
            self._check(bytes(self._data), data)
            self._data += data
        elif self._data[offset:end] != data:  # not a retried piece: the checks start again
            changed = self._data[:offset] + data + self._data[end:]
            self._reset_checks()
            self._check(b"", bytes(changed))
            self._data = changed
        self._writes += 1
        return len(data)

    def _check(self, before: bytes, data: bytes) -> None:
        """Feed `data`, written after the bytes `before`, to the UTF-8 and framing checks."""
        if not self._utf8:
            return
        pending = len(self._decoder.getstate()[0])
        try:
            piece = self._decoder.decode(data)
        except UnicodeDecodeError as exc:
            where = len(before) - pending + exc.start
            raise BodyNotText(f"not valid UTF-8 (bad byte at offset {where}); write text") from exc
        if self._framing is Framing.WHOLE:
            return
        if self._framing is Framing.LINE:
            newline = piece.find("\n")
            if newline >= 0:
                if piece[newline + 1 :].strip():
                    raise BodyMalformed(
                        "one line per open: text follows the first line; write one line"
                    )
                self._message = before + data
            return
        self._text += piece
        try:
            done = self._scanner.feed(self._text)
        except JsonMalformed as exc:
            raise BodyMalformed(str(exc)) from exc
        if done is not None:
            if self._text[done:].strip():
                raise OneMessagePerOpen(
                    "one message per open: more than one JSON value was written; write one "
                    "value, and open the file again for the next"
                )
            self._message = before + data

    def truncate(self) -> None:
        """Back to empty (OTRUNC, or a wstat to length 0)."""
        self._data.clear()
        self._reset_checks()

    def value(self) -> bytes:
        return bytes(self._data)
