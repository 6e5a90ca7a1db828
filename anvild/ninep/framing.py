"""A sans-IO 9P frame reader: feed bytes in, take complete frames out (intro(5) framing).

Every 9P message starts with its own total size as a little-endian u32. `FrameReader` buffers
bytes from the transport and hands back whole frames; it never reads a socket itself (h11 style),
so the trio server, the anvilctl client and the tests share it.

A frame whose size field is below the 7-byte header or above ``max_size`` (the negotiated
msize; version(5): "the client must not send messages longer than msize") raises `ProtocolError`
as soon as its header arrives, before its body is buffered: a hostile size field never makes the
reader allocate.
"""

from __future__ import annotations

import struct

from anvild.ninep.errors import ProtocolError
from anvild.ninep.messages import HEADER_SIZE

__all__ = ["FrameReader"]

_SIZE = struct.Struct("<I")


class FrameReader:
    """Split a byte stream into 9P frames no larger than ``max_size``."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer."""
        self._buf += data

    def next_frame(self) -> bytes | None:
        """Return the next complete frame, or None if more bytes are needed."""
        buf = self._buf
        if len(buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, 0)
        if size < HEADER_SIZE:
            raise ProtocolError(f"frame size {size} is smaller than the 7-byte 9P header")
        if size > self.max_size:
            raise ProtocolError(
                f"frame size {size} exceeds the negotiated maximum message size {self.max_size}"
            )
        if len(buf) < size:
            return None
        frame = bytes(buf[:size])
        del buf[:size]
        return frame

    def frames(self) -> list[bytes]:
        """Every complete frame buffered so far."""
        out: list[bytes] = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    def take(self) -> bytes:
        """Everything buffered and not yet returned as a frame; the reader is empty after."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)
