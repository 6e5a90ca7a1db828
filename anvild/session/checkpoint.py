"""`TextCheckpoint`: the answer a model is streaming, recorded at a bounded cadence.

The agent emits one `TextDelta` per provider delta, often a few characters each; one record per
delta would write hundreds of lines per answer. The session `add`s every delta here, and the
checkpoint's task (`run`, for the session's lifetime) writes what gathered as one
`TextStreamed` record `interval` seconds after the first unwritten piece arrived: a record per
interval at most, and a crash loses at most the last `interval` of text (the record is a plain
write: it survives kill -9, not a power loss). `flush` writes what is pending at once (a turn
that ends without committing its answer: cancel, error); `discard` drops it once the step's
assistant message is recorded, which holds the whole text (the reducer clears `streamed`).

Why the text is recorded for display only and never sent to a provider: docs/decisions.md,
"Streamed text and crashes".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio

INTERVAL: Final = 1.0
"""Seconds a streamed piece may wait before it is recorded."""


class TextCheckpoint:
    """Pending streamed text and the task that records it. `write(text)` records one
    `TextStreamed` and says whether it could (a session in error records nothing)."""

    def __init__(self, write: Callable[[str], bool], interval: float = INTERVAL) -> None:
        self._write = write
        self._interval = interval
        self._pending: list[str] = []
        self._arrived = trio.Event()  # set when the first piece after a write arrives
        self.records = 0  # TextStreamed records written (for tests and statistics)

    @property
    def pending(self) -> str:
        return "".join(self._pending)

    def add(self, text: str) -> None:
        if not text:
            return
        self._pending.append(text)
        self._arrived.set()

    def flush(self) -> None:
        """Record the pending text now (nothing when none is pending)."""
        text = self.pending
        self._pending.clear()
        if text and self._write(text):
            self.records += 1

    def discard(self) -> None:
        """Drop the pending text: the step's answer is in the transcript, all of it."""
        self._pending.clear()

    async def run(self) -> None:
        """Record pending text `interval` seconds after its first piece arrived, forever."""
        while True:
            await self._arrived.wait()
            await trio.sleep(self._interval)
            self._arrived = trio.Event()
            self.flush()


__all__ = ["INTERVAL", "TextCheckpoint"]
