"""`Recorder`: a session's writes to its journal, and what happens when one fails.

Every mutation is recorded before it is visible (`anvild.store`, docs/session.md "Records"):
`append` writes a record (no fsync), `append_synced` writes and fsyncs it in a worker thread
(a call's `ToolStarted` and `ToolFinished`, the session's end). `sync` diffs the agent's
transcript into records (`message_records`) on every agent event; the answer being streamed
goes through the recorder's `checkpoint` (`anvild.session.checkpoint`), dropped once the
step's assistant message is recorded. A failed write (disk full, a record too large, the file
closed) leaves the recorder broken: it writes nothing more, and the session is told once
(`on_failure`: it goes to `error` and cancels its turn). `retry` (start, restart) writes what
the records are missing, or stays broken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog
import trio

from anvild.llm.types import Message, Role, ToolResult
from anvild.session.checkpoint import INTERVAL, TextCheckpoint
from anvild.session.errors import RecordWriteFailed
from anvild.session.requests import RequestLog
from anvild.store import (
    Journal,
    MessageAppended,
    Record,
    RecordError,
    StoreError,
    TextStreamed,
    message_records,
)

log = structlog.get_logger(__name__)


class Recorder:
    """The record-writing side of one session.

    `transcript` gives the agent's messages as they are now (`sync` records what they added);
    `ended` says whether the session has exited (a failed write then changes nothing);
    `on_failure(reason)` is called once, when a write first fails; `redact` is applied to a
    tool result before it is recorded (`redacted`)."""

    def __init__(
        self,
        journal: Journal,
        *,
        transcript: Callable[[], Sequence[Message]],
        ended: Callable[[], bool],
        on_failure: Callable[[str], None],
        redact: Callable[[str], str] | None = None,
        text_interval: float = INTERVAL,
    ) -> None:
        self._journal = journal
        self._transcript = transcript
        self._ended = ended
        self._on_failure = on_failure
        self._redact = redact
        self._broken: str | None = None
        self._synced: tuple[object, object] = (None, None)  # transcripts at the last sync
        self.checkpoint = TextCheckpoint(self._record_text, text_interval)
        """The answer being streamed, recorded as `TextStreamed` at most `text_interval` behind."""
        self.requests = RequestLog()
        """The identity of each model request, for its `UsageReported` record."""

    @property
    def broken(self) -> str | None:
        """Why the last write failed, while nothing can be recorded; None otherwise."""
        return self._broken

    def append(self, record: Record) -> bool:
        """Record `record` now (a write, no fsync). False if the session cannot record."""
        if self._broken is not None:
            return False
        try:
            self._journal.append(record, sync=False)
        except StoreError as exc:  # a write failed, a record did not fit, the file closed
            self._fail(exc)
            return False
        return True

    async def append_synced(self, record: Record) -> bool:
        """Record `record` and fsync, in a worker thread (ToolStarted, ToolFinished, ...)."""
        if self._broken is not None:
            return False
        try:
            await trio.to_thread.run_sync(self._journal.append, record)
        except StoreError as exc:  # a write failed, a record did not fit, the file closed
            self._fail(exc)
            return False
        return True

    def sync(self) -> None:
        """Record what the agent's transcript added since the records' (`message_records`)."""
        if self._broken is not None:
            return
        # Called for every agent event, text deltas included. The agent's transcript and the
        # record state's are immutable tuples, replaced on change: when neither object
        # changed since the last sync there is nothing to compare (the comparison is linear
        # in the history's length, per delta).
        messages, recorded = self._transcript(), self._journal.state.messages
        if messages is self._synced[0] and recorded is self._synced[1]:
            return
        try:
            records = message_records(recorded, messages)
        except RecordError as exc:
            self._fail(exc)
            return
        for record in records:
            if not self.append(record):
                return
            if isinstance(record, MessageAppended) and record.message.role is Role.ASSISTANT:
                self.checkpoint.discard()  # the step's answer is recorded whole
        self._synced = (messages, self._journal.state.messages)

    def retry(self) -> None:
        """Leave the broken state: write what the records are missing, or stay broken
        (`RecordWriteFailed`)."""
        if self._broken is None:
            return
        self._broken = None
        self.sync()
        if (still := self._broken_reason()) is not None:
            raise RecordWriteFailed(
                f"session {self._journal.state.id} still cannot record: {still}; free space "
                "and retry"
            )

    def redacted(self, result: ToolResult) -> ToolResult:
        """`result` as it is recorded (the daemon's redaction applied to its content)."""
        redact = self._redact
        if redact is None:
            return result
        return ToolResult(result.call_id, redact(result.content), result.is_error)

    def _record_text(self, text: str) -> bool:
        return self.append(TextStreamed(text))

    def _broken_reason(self) -> str | None:
        return self._broken

    def _fail(self, exc: Exception) -> None:
        """A record could not be written: nothing more is, and the session is told."""
        if self._broken is not None or self._ended():
            return
        self._broken = str(exc)
        log.error("session.record_failed", session=self._journal.state.id, error=str(exc))
        self._on_failure(str(exc))
