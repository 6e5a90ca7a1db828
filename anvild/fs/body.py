"""Accumulating the body written on one open of a body file.

Files that take a body (a session's `in`, `outbox`, `context`, a bead's `description`) commit
at Tclunk what was written on that open, because clients split one logical write into many
Twrites: plan9port's `9p write` at 4096 bytes, v9fs at msize (DESIGN.md section 3). `BodyBuffer`
is the pure part: it places each write at its offset, refuses a gap (a write past the end), and
refuses to grow past a limit, so a runaway writer costs at most `limit` bytes of memory. The
refusal (`BodyTooLarge`) names the limit and, when one is given, the setting that sets it.

Writes that land inside what is already there overwrite it, as on a regular file; a client that
retries after a short write therefore does no harm. OTRUNC at open and a length-0 wstat both
mean "start from empty", which is what a fresh buffer already is.
"""

from __future__ import annotations

__all__ = ["DEFAULT_BODY_LIMIT", "BodyBuffer", "BodyError", "BodyTooLarge"]

DEFAULT_BODY_LIMIT = 16 << 20


class BodyError(ValueError):
    """A write that cannot become part of the body; the message is what the writer sees."""


class BodyTooLarge(BodyError):
    """A write that would make the body larger than its limit."""


class BodyBuffer:
    """Bytes written on one open, in offset order, up to `limit` bytes. `limit_name` says where
    the limit is set (e.g. `[sessions] max_prompt_bytes in the daemon's config`)."""

    __slots__ = ("_data", "_limit", "_limit_name", "_writes")

    def __init__(self, limit: int = DEFAULT_BODY_LIMIT, *, limit_name: str = "") -> None:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        self._limit = limit
        self._limit_name = limit_name
        self._data = bytearray()
        self._writes = 0

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def writes(self) -> int:
        """How many writes were accepted (an empty write counts: the writer meant "empty")."""
        return self._writes

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
        self._data[offset:end] = data
        self._writes += 1
        return len(data)

    def truncate(self) -> None:
        """Back to empty (OTRUNC, or a wstat to length 0)."""
        self._data.clear()

    def value(self) -> bytes:
        return bytes(self._data)
