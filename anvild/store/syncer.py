"""`sync_soon`: fsync a file shortly after a write, without making the writer wait for the disk.

For lines whose loss in a power cut costs little but whose fsync on the event loop costs every
stream its latency (a thousand turns ending together each fsyncing their checkpoint history).
The caller writes the bytes itself first (a plain write: they survive kill -9 at once); one
daemon thread, started on first use, fsyncs the queued paths in order, each once however often
it was queued meanwhile. A failed fsync is logged, never raised (the write already succeeded).
What is still queued when the process ends is not synced: a power cut then may lose it.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import structlog

__all__ = ["sync_soon", "wait_synced"]

log = structlog.get_logger(__name__)

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_queued: set[Path] = set()  # waiting for the thread: a write meanwhile needs no second entry
_paths: queue.SimpleQueue[Path] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_counts = [0, 0]  # paths queued, paths synced (or failed)


def sync_soon(path: Path) -> None:
    """Queue `path` (written already) to be fsynced by the syncer thread."""
    global _thread
    with _lock:
        if path in _queued:
            return
        _queued.add(path)
        _counts[0] += 1
        if _thread is None:
            _thread = threading.Thread(target=_work, name="anvild-sync", daemon=True)
            _thread.start()
    _paths.put(path)


def wait_synced(timeout: float | None = None) -> bool:
    """Block until every path queued so far is synced (tests; a clean shutdown); False when
    `timeout` seconds passed first."""
    with _idle:
        target = _counts[0]
        return _idle.wait_for(lambda: _counts[1] >= target, timeout)


def _work() -> None:
    while True:
        path = _paths.get()
        with _lock:
            _queued.discard(path)  # taken: a write from now on queues it again
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("store.sync_failed", path=str(path), error=str(exc))
        with _idle:
            _counts[1] += 1
            _idle.notify_all()
