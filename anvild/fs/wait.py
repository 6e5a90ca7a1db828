"""`WaitFile`: a file whose first read on an open blocks until an answer is known.

The `wait` files of sessions, beads and convoys. At open, `opened()` is called and returns the
wait of that open (a session takes its accepted-prompt sequence number there). The first read
awaits it and fixes the answer for the open; later reads slice that answer, so EOF follows.
Several tags may read one fid: one waits under a lock, the rest follow with the same answer.
A Tflush cancels the blocked read (the server cancels its scope: no reply). A clunk (or an
abort) of the fid cancels a read still waiting, which then returns an empty read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from anvild.fs.nodes import FsNode
from anvild.ninep.backend import Handle, OpenMode

__all__ = ["Wait", "WaitFile"]

Wait = Callable[[], Awaitable[str]]
"""One open's wait: returns the answer text (e.g. the state and a newline)."""


class _WaitHandle(Handle):
    def __init__(self, wait: Wait) -> None:
        self._wait = wait
        self._answer: bytes | None = None
        self._lock = trio.Lock()
        self._waiting: trio.CancelScope | None = None
        self._closed = False

    async def read(self, offset: int, count: int) -> bytes:
        async with self._lock:
            if self._answer is None:
                if self._closed:
                    return b""
                with trio.CancelScope() as self._waiting:
                    self._answer = (await self._wait()).encode()
                self._waiting = None
                if self._answer is None:
                    return b""  # the fid was clunked while this read waited
        return self._answer[offset : offset + count]

    def _close(self) -> None:
        self._closed = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def clunk(self) -> None:
        self._close()

    async def abort(self) -> None:
        self._close()


class WaitFile(FsNode):
    """A read-only file whose opens each get the wait `opened()` returns (module docstring)."""

    def __init__(self, name: str, opened: Callable[[], Wait]) -> None:
        super().__init__(name, 0o444)
        self._opened = opened

    async def open(self, mode: OpenMode) -> Handle:
        return _WaitHandle(self._opened())
