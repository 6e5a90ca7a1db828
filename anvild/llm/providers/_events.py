"""The provider glue every adapter shares: `SseProvider` and the event iterator it yields.

Each adapter's sans-IO `StreamState` turns one SSE event into zero or more StreamEvents and may
emit more when the body ends (`on_end`). `ProviderEvents` drives it from an SSE stream and stops
right after the `Finish` without reading further, so a server that keeps the connection open
after its terminal event (`message_stop`, `[DONE]`, `response.completed`) cannot hold the turn
until the idle deadline. It is a plain async iterator, not an async generator, so leaving the
provider's context manager early never leaves a generator to be finalised later.

A non-2xx response goes through the adapter's `http_error`, which may turn the `HttpError` into
a more precise error (a `ContextOverflow`); by default it stays an `HttpError`.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import httpx

from anvild.llm.capabilities import Capabilities
from anvild.llm.errors import HttpError, LlmError
from anvild.llm.http import Timeouts, open_event_stream
from anvild.llm.sse import SseEvent
from anvild.llm.stream import Finish, StreamEvent
from anvild.llm.types import ChatRequest


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


class SseProvider(abc.ABC):
    """The HTTP glue every adapter shares: it holds the client, the endpoint and the settings,
    and `stream` sends the adapter's request and yields `ProviderEvents` over its SSE body.
    An adapter supplies only what differs: `build_request` (URL, headers, body) and
    `new_state` (its sans-IO StreamState)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        endpoint: str,
        api_key: str | None,
        name: str,
        capabilities: Capabilities,
        timeouts: Timeouts,
    ) -> None:
        self._client = client
        self._endpoint = endpoint
        self._api_key = api_key
        self._name = name
        self.capabilities = capabilities
        self._timeouts = timeouts

    @property
    def name(self) -> str:
        return self._name

    @abc.abstractmethod
    def build_request(self, request: ChatRequest) -> httpx.Request:
        """The adapter's HTTP request for one sample."""

    @abc.abstractmethod
    def new_state(self) -> WireState:
        """A fresh stream state machine for one response."""

    def http_error(self, error: HttpError) -> LlmError:
        """The error a non-2xx response raises: `error` itself unless the adapter recognises its
        body (say, as a context overflow)."""
        return error

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        http_request = self.build_request(request)
        async with open_event_stream(
            self._client, http_request, timeouts=self._timeouts, on_http_error=self.http_error
        ) as sse:
            yield ProviderEvents(sse, self.new_state())
