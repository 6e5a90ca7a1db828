"""EventChannel: the bounded, coalescing, never-blocking path from a running agent to its consumer.

The loop never waits for its renderer: `send_nowait` never blocks and the channel holds at most
`capacity` items. A delta of the same kind and step as the newest buffered one is merged into it
(no text lost); a full buffer folds its two oldest adjacent droppable items into one
`Lagged(dropped=N)` marker, so the reader learns where it missed something and reads the recent
past. A `TurnFinished` is folded only when nothing else can be. One reader (`receive`);
`close()` ends the producer side (drain, then `EndOfChannel`), `close_receiver()` the reader's
(events discarded at once). Approvals never travel here: losing a renderer grants nothing.
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
