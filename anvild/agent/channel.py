"""EventChannel: the bounded, coalescing, never-blocking path from a running agent to its consumer.

Theory of operation. The agent loop must never wait for whoever renders its events: a slow
renderer may not slow the model's stream down or make the daemon buffer without bound, and a
renderer that went away may not hang a turn (review finding 10, course 08.B). So `send_nowait`
never blocks, and the channel holds at most `capacity` items:

- a text (or reasoning) delta that arrives while the newest buffered event is a delta of the
  same kind and step is merged into it: a slow consumer gets fewer, longer deltas and loses no
  text, and a fast one sees them as they came;
- an event that finds the buffer full makes room by folding the two oldest adjacent droppable
  items (events or markers) into one `Lagged(dropped=N)` marker, so the consumer learns that, and
  where, it missed something, and what it reads after catching up is the recent past (the
  answer streaming now, not tool chatter from minutes ago);
- a `TurnFinished` is never folded while any other pair can be: only a consumer that has read
  nothing for about `capacity / 2` whole turns can lose one, and then behind a marker too.

The consumer side is a single reader (`receive`, `async for`); the session supervisor fans events
out to its own readers. `close()` is the producer's end: the reader drains what is buffered and
then gets `trio.EndOfChannel`. `close_receiver()` is the reader's end: from then on events are
discarded at once (a vanished renderer costs nothing, and nothing waits for it). Events carry
information only; approvals never travel through this channel, so losing a renderer can never
grant anything.
"""

from __future__ import annotations

from collections import deque

import attrs
import trio

from anvild.agent.events import AgentEvent, Lagged, ReasoningDelta, TextDelta, TurnFinished

DEFAULT_CAPACITY = 256


@attrs.frozen
class ChannelStatistics:
    buffered: int
    capacity: int
    coalesced: int  # deltas merged into an earlier buffered delta
    dropped: int  # events replaced by Lagged markers (or discarded after close_receiver)
    closed: bool
    receiver_closed: bool


def _weight(item: AgentEvent) -> int:
    """How many original events an item stands for."""
    return item.dropped if isinstance(item, Lagged) else 1


def _coalesce(last: AgentEvent, event: AgentEvent) -> AgentEvent | None:
    if isinstance(last, TextDelta) and isinstance(event, TextDelta) and last.step == event.step:
        return TextDelta(last.step, last.text + event.text)
    if (
        isinstance(last, ReasoningDelta)
        and isinstance(event, ReasoningDelta)
        and last.step == event.step
    ):
        return ReasoningDelta(last.step, last.text + event.text)
    return None


class EventChannel:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 2:
            raise ValueError("an event channel needs room for at least 2 items")
        self._capacity = capacity
        self._items: deque[AgentEvent] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self._receiver_closed = False
        self._coalesced = 0
        self._dropped = 0

    # -- producer ---------------------------------------------------------------------------

    def send_nowait(self, event: AgentEvent) -> None:
        """Queue `event` without ever blocking (see the module docstring for what may be merged
        or dropped). Raises `trio.ClosedResourceError` after `close()`."""
        if self._closed:
            raise trio.ClosedResourceError("the event channel was closed by its producer")
        if self._receiver_closed:
            self._dropped += 1
            return
        items = self._items
        if items and (merged := _coalesce(items[-1], event)) is not None:
            items[-1] = merged
            self._coalesced += 1
        else:
            if len(items) >= self._capacity:
                self._make_room()
            items.append(event)
        self._lot.unpark_all()

    def _make_room(self) -> None:
        """Free one slot by folding two adjacent items into a Lagged marker: the oldest pair of
        droppable items if there is one, else the oldest pair at all."""
        items = self._items
        pairs = range(len(items) - 1)
        index = next(
            (
                i
                for i in pairs
                if not isinstance(items[i], TurnFinished)
                and not isinstance(items[i + 1], TurnFinished)
            ),
            0,
        )
        first, second = items[index], items[index + 1]
        self._dropped += sum(1 for item in (first, second) if not isinstance(item, Lagged))
        del items[index + 1]
        items[index] = Lagged(_weight(first) + _weight(second))

    def close(self) -> None:
        """The producer is done: the reader gets what is buffered, then `trio.EndOfChannel`."""
        self._closed = True
        self._lot.unpark_all()

    # -- consumer ---------------------------------------------------------------------------

    def receive_nowait(self) -> AgentEvent:
        if self._receiver_closed:
            raise trio.ClosedResourceError("the event channel's reader closed it")
        if self._items:
            return self._items.popleft()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> AgentEvent:
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                event = self.receive_nowait()
            except trio.WouldBlock:
                await self._lot.park()
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return event

    def close_receiver(self) -> None:
        """The reader is gone: drop what is buffered and discard every later event at once."""
        self._receiver_closed = True
        self._dropped += len(self._items)
        self._items.clear()
        self._lot.unpark_all()

    def __aiter__(self) -> EventChannel:
        return self

    async def __anext__(self) -> AgentEvent:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(
            buffered=len(self._items),
            capacity=self._capacity,
            coalesced=self._coalesced,
            dropped=self._dropped,
            closed=self._closed,
            receiver_closed=self._receiver_closed,
        )
