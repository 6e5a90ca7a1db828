"""A span processor that never blocks the caller: a bounded queue and one export thread.

`on_end` appends a finished span to a queue of at most `max_queue` spans and returns; when the
queue is full the span is dropped and counted (`dropped`), and the first drop and every
thousandth are logged. The append takes no lock and wakes nobody unless the queue has just
reached a whole batch: a daemon thread wakes every `delay` seconds (or at a full batch, a
flush, the shutdown) and hands the queue to the exporter in batches of up to `batch` spans
(its network time, retries and failures stay on that thread; a failed export is counted in
`failed`). Besides the SDK's spans (`on_end`) it takes `Pending` ones (`put`), made into
`ReadableSpan`s on that thread. `force_flush` and `shutdown` wait for at most their timeout.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Final, Protocol

import structlog
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = structlog.get_logger(__name__)

LOG_EVERY: Final = 1000


class Pending(Protocol):
    """A finished span not made into the SDK's yet (`anvild.telemetry.spans.LightSpan`)."""

    def readable(self) -> ReadableSpan: ...


class BoundedProcessor(SpanProcessor):
    def __init__(
        self, exporter: SpanExporter, *, max_queue: int = 2048, batch: int = 256, delay: float = 1.0
    ) -> None:
        self.exporter = exporter
        self._spans: collections.deque[ReadableSpan | Pending] = collections.deque()
        self._max_queue = max_queue
        self._batch = batch
        self._delay = delay
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = 0  # spans taken from the queue and not yet exported
        self.dropped = 0
        self.exported = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._work, name="anvild-otlp", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self.put(span)

    def put(self, span: ReadableSpan | Pending) -> None:
        """Queue a finished span, or drop and count it when the queue is full."""
        spans = self._spans
        if len(spans) >= self._max_queue:
            self.dropped += 1
            if self.dropped % LOG_EVERY == 1:
                log.warning("telemetry.spans_dropped", dropped=self.dropped, queue=self._max_queue)
            return
        spans.append(span)  # a deque's append is atomic: no lock on the caller's path
        if len(spans) == self._batch:
            self._wake.set()

    def _take(self) -> list[ReadableSpan]:
        """Up to a batch from the queue, counted busy until exported (under the lock, so a
        flush never sees them in neither place)."""
        with self._idle:
            taken: list[ReadableSpan | Pending] = []
            while self._spans and len(taken) < self._batch:
                taken.append(self._spans.popleft())
            self._busy = len(taken)
        return [s if isinstance(s, ReadableSpan) else s.readable() for s in taken]

    def _work(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            stopping = self._stop.is_set()
            while spans := self._take():
                try:
                    result = self.exporter.export(spans)
                except Exception:  # an exporter bug must not end the thread
                    log.exception("telemetry.export_failed")
                    result = SpanExportResult.FAILURE
                if result is SpanExportResult.SUCCESS:
                    self.exported += len(spans)
                else:
                    self.failed += len(spans)
                with self._idle:
                    self._busy = 0
                    self._idle.notify_all()
            if stopping:
                return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        self._wake.set()
        with self._idle:
            while self._spans or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.05))
        return True

    def shutdown(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self.exporter.shutdown()


__all__ = ["BoundedProcessor"]
