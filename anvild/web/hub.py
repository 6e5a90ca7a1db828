"""`EventHub`: the board's one numbered event feed, read from the same broadcasts as 9P readers.

It follows the daemon's `agent/events` and each built session's `events` (from the start, the
daemon's first line about it or when found built; backlog included). A session at rest
(`at_rest`) is parked once its lines are taken (cursor closed: it may unload); a daemon line
about it, a change of it (`version`) or its rebuild resumes it where the hub stopped (from the
backlog; `lagged` for what that lost). Each line taken gets the next number and is kept, with
its session ("" for the daemon's), in a window of the latest `keep`. A position is `EPOCH-N` (a
new epoch each start): an SSE stream resumes after the last one it saw (`Last-Event-ID`), in
order with no gap, or gets one `reset` (the page reloads) for one no longer kept or of another
run. `pump` drains every cursor at once, so a snapshot and its position agree with the feed;
else one task drains the cursors whose `on_ready` fired. A session's queue is fed as
`{"type":"queue","text":...}` when changed, looked at most every `QUEUE_EVERY` seconds. The
hub holds lines, never session state.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncGenerator, Callable
from typing import Final, Protocol

import attrs
import trio

from anvild.lines.broadcast import Broadcast, Cursor, lag_marker

__all__ = ["EventHub", "FeedItem", "Gap", "Queued"]

_READ: Final = 1 << 20
ROOT: Final = ""
"""The session id of a line from the daemon's own stream."""
QUEUE_EVERY: Final = 0.2
"""Seconds between two looks at one session's queue (a change shows at most this late)."""
REBUILT_EVERY: Final = 1.0
"""Seconds between two looks for sessions built since (a change shows at most this late)."""


@attrs.frozen
class FeedItem:
    seq: int
    session: str  # "" for agent/events
    line: bytes  # one JSON object, no newline

    def data(self) -> str:
        """The SSE data: `{"session": ID or null, "event": {...}}`."""
        who = json.dumps(self.session or None)
        return f'{{"session":{who},"event":{self.line.decode("utf-8", "replace")}}}'


class Queued(Protocol):
    """A session as the hub watches its queue (`anvild.session.Session`)."""

    @property
    def version(self) -> int: ...

    async def wait_changed(self, seen: int) -> int: ...

    def queue_text(self) -> str: ...


@attrs.frozen
class _Parked:
    """A session whose cursor the hub closed at rest: `taken` lines of `stream` were taken
    (`stream` None after an unload: `taken` lines of its rebuild's stream are the kept ones)."""

    stream: Broadcast | None
    taken: int


def _queue_line(text: str) -> bytes:
    return json.dumps({"type": "queue", "text": text}, separators=(",", ":")).encode()


class EventHub:
    """The numbered feed of the daemon's and every session's events (module docstring).
    `session_events(id)`: a built session's stream (None: not built, or gone), building none;
    `sessions()`: the ids of those built (asked every `REBUILT_EVERY` s); `queued(id)`: the
    session whose queue is watched (None: not watched); `at_rest(id)`: whether its cursor may
    be closed now."""

    def __init__(
        self,
        root: Broadcast,
        session_events: Callable[[str], Broadcast | None],
        sessions: Callable[[], list[str]],
        *,
        keep: int = 20_000,
        queued: Callable[[str], Queued | None] = lambda session_id: None,
        at_rest: Callable[[str], bool] = lambda session_id: False,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self._root, self._session_events, self._sessions = root, session_events, sessions
        self._queued, self._keep, self.epoch = queued, keep, secrets.token_hex(4)
        self._at_rest = at_rest
        self._parked: dict[str, _Parked] = {}
        self._items: list[FeedItem] = []
        self._seq = 0
        self._cursors: dict[str, Cursor] = {}
        self._streams: dict[str, Broadcast] = {}  # what each cursor reads
        self._wakers: dict[str, Callable[[], None]] = {}
        self._ready: dict[str, None] = {}  # sessions whose cursor has lines (in order)
        self._drainer: trio.Event | None = None  # set when `_ready` gains its first entry
        self._watching: dict[str, trio.CancelScope] = {}
        self._partial: dict[str, bytes] = {}
        # Per feed filter (None: the daemon's lines only; a session id: those and its own),
        # made by a waiting feed, set by the lines it takes.
        self._changed: dict[str | None, trio.Event] = {}
        self._nursery: trio.Nursery | None = None

    @property
    def seq(self) -> int:
        """The number of the latest line taken (0: none yet)."""
        return self._seq

    def position(self) -> str:
        """`EPOCH-SEQ` after a `pump`: what a snapshot reports and an SSE id carries. The
        epoch is this hub's (a new one each daemon start), so an id from before a restart is
        never taken for a number of this run."""
        return f"{self.epoch}-{self.pump()}"

    def resume_point(self, position: str) -> int | None:
        """The number to resume after, from a `position` of this hub; None when it is of
        another run or not one at all (the reader must reload)."""
        epoch, _, number = position.strip().rpartition("-")
        if epoch != self.epoch or not number.isdigit() or int(number) > self._seq:
            return None
        return int(number)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the daemon's stream and every session's until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._follow(ROOT, self._root)
            for session_id in self._sessions():
                self._follow_session(session_id)
            nursery.start_soon(self._drain)
            nursery.start_soon(self._watch_rebuilds)
            task_status.started()

    def _follow_session(self, session_id: str, announced: bool = True) -> None:
        """Follow a session's stream; one not `announced` (a later line about it) only while
        its stream is open (an ended one's backlog was taken when it was announced)."""
        if session_id in self._cursors:
            return
        broadcast = self._session_events(session_id)
        parked = self._parked.pop(session_id, None)
        if broadcast is not None and broadcast.closed and parked is None and not announced:
            return
        if parked is not None and parked.stream is not None and parked.stream is not broadcast:
            parked = self._left(session_id, parked.stream, parked.taken)  # it was unloaded
        if broadcast is not None:
            if parked is None:
                self._follow(session_id, broadcast)
            else:
                self._catch_up(session_id, broadcast, parked.taken)
                self._follow(session_id, broadcast, backlog=False)
            session = self._queued(session_id)
            watched = session_id in self._watching  # still, from before it was parked
            if session is not None and self._nursery is not None and not watched:
                self._watching[session_id] = scope = trio.CancelScope()
                seen = (session.version, session.queue_text())  # now: no change is missed
                self._nursery.start_soon(self._watch_queue, session_id, session, seen, scope)

    async def _watch_queue(
        self, session_id: str, session: Queued, seen: tuple[int, str], scope: trio.CancelScope
    ) -> None:
        """Feed the session's queue each time it changes, until its events stream ends or it
        is unloaded; a change of a parked session resumes it (its stream may have lines)."""
        version, shown = seen
        with scope:
            while True:
                version = await session.wait_changed(version)
                if session_id in self._parked:
                    self._follow_session(session_id)
                text = session.queue_text()
                if text != shown:
                    shown = text
                    self.pump()  # what the session's streams said before the change comes first
                    self._add(session_id, [_queue_line(text)])
                await trio.sleep(QUEUE_EVERY)

    def _follow(self, session_id: str, broadcast: Broadcast, *, backlog: bool = True) -> None:
        cursor = broadcast.subscribe(backlog=backlog)
        self._cursors[session_id], self._streams[session_id] = cursor, broadcast

        def wake() -> None:
            if not self._ready and self._drainer is not None:
                self._drainer.set()
            self._ready[session_id] = None

        self._wakers[session_id] = wake
        wake()  # drained at once: its lines taken, or parked if it is at rest with none

    async def _drain(self) -> None:
        """Take the lines of every cursor that said it has some, once per wake-up."""
        while True:
            if not self._ready:
                self._drainer = trio.Event()
                await self._drainer.wait()
            ready, self._ready = self._ready, {}
            for session_id in ready:
                cursor = self._cursors.get(session_id)
                if cursor is not None:
                    self._drain_one(session_id, cursor)

    def _drain_one(self, session_id: str, cursor: Cursor) -> None:
        while True:
            data = cursor.read_nowait(_READ)
            if data is None:
                resting = session_id != ROOT and session_id not in self._partial
                if resting and self._at_rest(session_id):
                    self._park(session_id, cursor)
                    return
                cursor.on_ready(self._wakers[session_id])  # refused: still registered
                return
            if not data:
                self._forget(session_id, cursor)
                return
            self._take(session_id, data)

    def _forget(self, session_id: str, cursor: Cursor, *, watch: bool = False) -> None:
        """Close `cursor`; unless `watch` (parked), stop watching the session too."""
        cursor.close()
        if self._cursors.get(session_id) is cursor:
            del self._cursors[session_id], self._streams[session_id]
            self._parked.pop(session_id, None)
            self._wakers.pop(session_id, None)
            self._partial.pop(session_id, None)
            if not watch:
                self._unwatch(session_id)

    def _unwatch(self, session_id: str) -> None:
        if (scope := self._watching.pop(session_id, None)) is not None:
            scope.cancel()

    def _park(self, session_id: str, cursor: Cursor) -> None:
        """Close the cursor of a session at rest whose lines are all taken (module docstring)."""
        stream = self._streams[session_id]
        cursor.on_ready(None)
        self._forget(session_id, cursor, watch=True)  # a change of it resumes it
        self._parked[session_id] = _Parked(stream, stream.statistics().published)

    def _catch_up(self, session_id: str, stream: Broadcast, taken: int) -> None:
        """Take what `stream` published after its first `taken` lines, from its backlog."""
        missed = stream.statistics().published - taken
        if missed <= 0:
            return
        backlog = stream.backlog()
        lines = [line.encode("utf-8", "surrogateescape") for line in backlog[-missed:]]
        if missed > len(backlog):
            lines.insert(0, lag_marker(missed - len(backlog)).rstrip(b"\n"))
        self._add(session_id, lines)

    def _left(self, session_id: str, stream: Broadcast, taken: int) -> _Parked:
        """A parked session's stream was let go (an unload): its last lines taken now; its
        rebuild's stream starts with its backlog (kept), which the hub has then taken."""
        self._catch_up(session_id, stream, taken)
        return _Parked(None, len(stream.backlog()))

    def unloaded(self, session_id: str) -> None:
        """A session was unloaded for idleness: let go of its stream (a listener of the
        manager's unloads), so the hub never keeps what the unload dropped."""
        parked = self._parked.get(session_id)
        if parked is not None and parked.stream is not None:
            self._parked[session_id] = self._left(session_id, parked.stream, parked.taken)
            self._unwatch(session_id)

    async def _watch_rebuilds(self) -> None:
        """Follow each session built since the hub last looked (restored or unloaded, then
        used in a way that changes no state: the daemon's stream says nothing), looked for
        every `REBUILT_EVERY` seconds; one parked with its stream is watched already."""
        while True:
            await trio.sleep(REBUILT_EVERY)
            for session_id in self._sessions():
                parked = self._parked.get(session_id)
                if session_id not in self._cursors and (parked is None or parked.stream is None):
                    self._follow_session(session_id, announced=False)

    def pump(self) -> int:
        """Take every line the cursors hold now (no await); return `seq`."""
        drained: set[str] = set()
        while todo := [(k, c) for k, c in self._cursors.items() if k not in drained]:
            session_id, cursor = todo[0]  # a session the daemon's stream announced is next
            drained.add(session_id)
            self._drain_one(session_id, cursor)
        return self._seq

    def _take(self, session_id: str, data: bytes) -> None:
        *lines, rest = (self._partial.pop(session_id, b"") + data).split(b"\n")
        if rest:
            self._partial[session_id] = rest
        self._add(session_id, lines)

    def _add(self, session_id: str, lines: list[bytes]) -> None:
        for line in lines:
            self._seq += 1
            self._items.append(FeedItem(self._seq, session_id, line))
            if session_id == ROOT and b'"id"' in line:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                about = event.get("id") if isinstance(event, dict) else None
                if isinstance(about, str) and about not in self._cursors:  # new, or woken
                    self._follow_session(about, event.get("type") == "session_created")
                elif isinstance(about, str) and about in self._wakers:
                    self._wakers[about]()  # its state changed: drained again, maybe parked
        if len(self._items) > 2 * self._keep:
            del self._items[: len(self._items) - self._keep]
        if lines and self._changed:
            if session_id == ROOT:  # every feed takes the daemon's lines
                changed = list(self._changed.values())
                self._changed.clear()
            else:
                event = self._changed.pop(session_id, None)
                changed = [] if event is None else [event]
            for event in changed:
                event.set()

    def since(self, after: int, session: str | None = None) -> list[FeedItem] | None:
        """The kept lines numbered above `after` (the daemon's, and `session`'s when given), or
        None when some of them are no longer kept."""
        items = self._items
        first = items[0].seq if items else self._seq + 1
        if after < first - 1 and after < self._seq:
            return None
        start = max(0, after + 1 - first)
        return [i for i in items[start:] if i.session in (ROOT, session)]

    def recent(self, session: str, limit: int) -> list[FeedItem]:
        """The latest `limit` kept lines of `session` (after a `pump`, for a snapshot)."""
        mine = [i for i in self._items if i.session == session]
        return mine[-limit:]

    async def feed(
        self, after: int, session: str | None = None, *, heartbeat: float = 15.0
    ) -> AsyncGenerator[FeedItem | None, None]:
        """The lines after `after` (see `since`), then each new one as it comes, forever; None
        when `heartbeat` seconds passed without one. Raises `Gap` when `after` is too old."""
        while True:
            changed = self._changed.get(session)
            if changed is None:
                changed = self._changed[session] = trio.Event()
            items = self.since(after, session)
            if items is None:
                raise Gap(after)
            after = self._seq  # every line up to here was looked at
            for item in items:
                yield item
            if items:
                continue
            with trio.move_on_after(heartbeat):
                await changed.wait()
                continue
            yield None


class Gap(Exception):
    """A reader asked to resume after a line no longer kept."""

    def __init__(self, after: int) -> None:
        super().__init__(f"events after {after} are no longer kept")
        self.after = after
