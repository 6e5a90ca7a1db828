"""The event iterator every adapter's Provider yields: SSE events in, StreamEvents out.

Each adapter's sans-IO `StreamState` turns one SSE event into zero or more StreamEvents and may
emit more when the body ends (`on_end`). `ProviderEvents` drives it from an SSE stream and stops
right after the `Finish` without reading further, so a server that keeps the connection open
after its terminal event (`message_stop`, `[DONE]`, `response.completed`) cannot hold the turn
until the idle deadline. It is a plain async iterator, not an async generator, so leaving the
provider's context manager early never leaves a generator to be finalised later.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from anvild.llm.sse import SseEvent
from anvild.llm.stream import Finish, StreamEvent


class WireState(Protocol):
    """What every adapter's `StreamState` provides."""

    def on_sse(self, event: SseEvent) -> list[StreamEvent]: ...

    def on_end(self) -> list[StreamEvent]: ...


class ProviderEvents:
    def __init__(self, sse: AsyncIterator[SseEvent], state: WireState) -> None:
        self._sse = sse
        self._state = state
        self._ready: deque[StreamEvent] = deque()
        self._done = False

    def __aiter__(self) -> ProviderEvents:
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            try:
                sse = await anext(self._sse)
            except StopAsyncIteration:
                self._done = True
                self._ready.extend(self._state.on_end())
            else:
                self._ready.extend(self._state.on_sse(sse))
        event = self._ready.popleft()
        if isinstance(event, Finish):
            self._done = True
            self._ready.clear()
        return event
