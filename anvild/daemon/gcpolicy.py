"""The daemon's garbage-collector policy: keep long-lived objects out of the collector's scans.

    policy = GcPolicy()                 # the daemon command's (anvild.__main__), not a library's:
    sessions = Sessions.build(..., gc_policy=policy)    # it changes the whole process
    # Sessions.run: policy.configure(), then nursery.start(policy.run) once sessions are
    # restored; Sessions.build feeds it the manager's events (policy.on_event)

Why. The daemon is one Python thread; a collection stops every session and every 9P reply
for as long as it takes. A full (generation-2) collection walks every container object the
process holds: a daemon with a hundred sessions (their tools, schemas, histories, trio tasks)
paused 60-520 ms for one, the largest item of the streaming latency tail (docs/PERF.md,
"Sessions"). Almost all of those objects live as long as their session: scanning them again
and again finds nothing.

Theory of operation. `gc.freeze()` moves every object the collector tracks into the permanent
generation, which no collection scans (objects there are still freed when their reference
count drops to zero; only cycles among them wait). So:

- at start-up (sessions restored, the daemon serving) everything is frozen;
- after a session is created (`SessionCreated`) its objects are frozen with the rest, once
  the events of a burst of creations have settled (`SETTLE` seconds);
- after a session ended (`SessionEnded`: killed, or an ephemeral session reaped) its objects
  may be unreachable cycles inside the frozen set, so the set is unfrozen, collected once
  (one full collection, at a time the policy chooses, coalescing a burst of kills), and frozen
  again. That keeps memory bounded over many sessions' lives.
- `GEN0_THRESHOLD` (instead of CPython's 700) makes young collections rarer: streaming
  allocates many short-lived containers, nearly all freed by reference counting, and each
  young collection also ages survivors towards the expensive generations.

Every freeze and collection is logged at debug level with its duration.
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
