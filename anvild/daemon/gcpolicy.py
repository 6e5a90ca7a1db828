"""The daemon's garbage-collector policy: keep long-lived objects out of the collector's scans.

A full collection walks every container and stops every session and 9P reply meanwhile (60-520
ms with a hundred sessions; docs/PERF.md, "Sessions"), yet session objects live as long as the
session. So `gc.freeze()` everything at start-up and after each burst of `SessionCreated`
(`SETTLE` seconds); after `SessionEnded`, unfreeze, collect once (coalescing bursts) and freeze
again, keeping memory bounded. `GEN0_THRESHOLD` makes young collections rarer. Process-wide:
only the daemon command configures it (`Sessions.build(..., gc_policy=...)`), never a library.
Each freeze and collection is logged at debug level with its duration.
"""

from __future__ import annotations

import gc
import time
from typing import Final

import structlog
import trio

from anvild.session.events import SessionCreated, SessionEnded, SessionEvent

log = structlog.get_logger(__name__)

GEN0_THRESHOLD: Final = 10_000
GEN1_THRESHOLD: Final = 10
GEN2_THRESHOLD: Final = 10
SETTLE: Final = 1.0  # seconds after the last creation or end before freezing / collecting


class GcPolicy:
    def __init__(self, *, settle: float = SETTLE) -> None:
        self.settle = settle
        self._created = False  # a session was created since the last freeze
        self._ended = False  # a session ended since the last collection
        self._wake = trio.Event()
        self.freezes = 0
        self.collections = 0

    def configure(self) -> None:
        """Set the thresholds (process-wide; call once, before the event loop runs)."""
        gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)

    def on_event(self, event: SessionEvent) -> None:
        if isinstance(event, SessionCreated) and not event.restored:
            self._created = True
            self._wake.set()
        elif isinstance(event, SessionEnded):
            self._ended = True
            self._wake.set()

    def collect_soon(self) -> None:
        """Collect after the settle time: for what is dropped without a session ending (the
        sessions unloaded for idleness)."""
        self._ended = True
        self._wake.set()

    def freeze_soon(self) -> None:
        """Freeze after the settle time: for objects built outside a burst of `new` (the
        sessions a lazy restart builds after the start)."""
        self._created = True
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Freeze now, then after each settled burst of creations or ends, until cancelled."""
        self._freeze()
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(self.settle)  # let a burst of `new` or `kill` finish first
            if self._ended:
                self._collect()
            self._freeze()

    def _freeze(self) -> None:
        start = time.perf_counter()
        gc.freeze()
        self._created = False
        self.freezes += 1
        log.debug("gc.freeze", ms=round(1000 * (time.perf_counter() - start), 2))

    def _collect(self) -> None:
        start = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        self._ended = False
        self.collections += 1
        log.debug("gc.collect", found=found, ms=round(1000 * (time.perf_counter() - start), 1))
