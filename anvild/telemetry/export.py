"""A span processor that never blocks the caller: a bounded queue and one export thread.

`on_end` puts a finished span on a queue of at most `max_queue` spans and returns; when the
queue is full the span is dropped and counted (`dropped`), and the first drop and every
thousandth are logged. A daemon thread takes batches of up to `batch` spans and hands them to
the exporter (whose network time, retries and failures stay on that thread; a failed export is
counted in `failed`). `shutdown` flushes for at most its timeout, then leaves.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Final

import structlog
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = structlog.get_logger(__name__)

LOG_EVERY: Final = 1000


class BoundedProcessor(SpanProcessor):
    def __init__(
        self, exporter: SpanExporter, *, max_queue: int = 2048, batch: int = 256, delay: float = 1.0
    ) -> None:
        self.exporter = exporter
        self._queue: queue.Queue[ReadableSpan] = queue.Queue(max_queue)
        self._batch = batch
        self._delay = delay
        self._stop = threading.Event()
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
        try:
            self._queue.put_nowait(span)
        except queue.Full:
            self.dropped += 1
            if self.dropped % LOG_EVERY == 1:
                log.warning(
                    "telemetry.spans_dropped", dropped=self.dropped, queue=self._queue.maxsize
                )

    def _take(self) -> list[ReadableSpan]:
        try:
            first = self._queue.get(timeout=self._delay)
        except queue.Empty:
            return []
        spans = [first]
        while len(spans) < self._batch:
            try:
                spans.append(self._queue.get_nowait())
            except queue.Empty:
                break
        with self._idle:
            self._busy = len(spans)
        return spans

    def _work(self) -> None:
        while not (self._stop.is_set() and self._queue.empty()):
            spans = self._take()
            if spans:
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

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        with self._idle:
            while not self._queue.empty() or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.05))
        return True

    def shutdown(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        self.exporter.shutdown()


__all__ = ["BoundedProcessor"]
