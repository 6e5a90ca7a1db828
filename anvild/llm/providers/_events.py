"""The provider glue every adapter shares: `SseProvider` and the event iterator it yields.

Each adapter's sans-IO `StreamState` turns one SSE event into zero or more StreamEvents and may
emit more when the body ends (`on_end`). `ProviderEvents` drives it from an SSE stream and stops
right after the `Finish` without reading further, so a server that keeps the connection open
after its terminal event (`message_stop`, `[DONE]`, `response.completed`) cannot hold the turn
until the idle deadline. Text and reasoning deltas of one block that one socket read brought
are joined into one event (a daemon that is behind pays the agent's per-event work once per read,
not per delta); an error in a later event of that read is raised after the events before it. It
is a plain async iterator, not an async generator, so leaving the provider's context manager
early never leaves a generator to be finalised later.

A non-2xx response goes through the adapter's `http_error`, which may turn the `HttpError` into
a more precise error (a `ContextOverflow`); by default it stays an `HttpError`.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Protocol

import httpx

from anvild.llm.capabilities import Capabilities
from anvild.llm.errors import ContextOverflow, HttpError, LlmError
from anvild.llm.http import SseStream, Timeouts, open_event_stream
from anvild.llm.providers import _overflow
from anvild.llm.sse import SseEvent
from anvild.llm.stream import Finish, ReasoningDelta, StreamEvent, TextDelta
from anvild.llm.types import ChatRequest


def output_options(request: ChatRequest, capabilities: Capabilities) -> dict[str, Any]:
    """A request body's output settings: the cap in the field the target reads, and the
    temperature where the target takes one."""
    options: dict[str, Any] = {capabilities.max_tokens_field: request.max_tokens}
    if capabilities.temperature and request.temperature is not None:
        options["temperature"] = request.temperature
    return options


class WireState(Protocol):
    """What every adapter's `StreamState` provides."""

    def on_sse(self, event: SseEvent) -> list[StreamEvent]: ...

    def on_end(self) -> list[StreamEvent]: ...


class ProviderEvents:
    def __init__(self, sse: AsyncIterator[SseEvent], state: WireState) -> None:
        self._sse = sse
        # The events already decoded from what was read, taken without reading more.
        self._decoded = sse.decoded if isinstance(sse, SseStream) else None
        self._state = state
        self._ready: deque[StreamEvent] = deque()
        self._error: LlmError | None = None  # from a later event of a read, raised in turn
        self._done = False

    def __aiter__(self) -> ProviderEvents:
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._ready:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._done:
                raise StopAsyncIteration
            try:
                sse = await anext(self._sse)
            except StopAsyncIteration:
                self._done = True
                self._ready.extend(self._state.on_end())
            else:
                if self._take(sse) and self._decoded is not None:
                    for more in self._decoded():
                        try:
                            if not self._take(more):
                                break
                        except LlmError as exc:
                            self._error = exc
                            break
        event = self._ready.popleft()
        if isinstance(event, Finish):
            self._done = True
            self._ready.clear()
        return event

    def _take(self, sse: SseEvent) -> bool:
        """Queue what one SSE event means, joining a delta to the one before it of the same kind
        and block; False once the stream's `Finish` is queued (nothing after it is read)."""
        ready = self._ready
        for event in self._state.on_sse(sse):
            if isinstance(event, TextDelta | ReasoningDelta) and ready:
                last = ready[-1]
                if type(last) is type(event) and last.block == event.block:
                    ready[-1] = type(event)(event.block, last.text + event.text)
                    continue
            ready.append(event)
            if isinstance(event, Finish):
                return False
        return True


class SseProvider(abc.ABC):
    """The HTTP glue every adapter shares: it holds the client, the endpoint and the settings,
    and `stream` sends the adapter's request and yields `ProviderEvents` over its SSE body.
    An adapter supplies only what differs: its `kind`, `default_capabilities`, `wire_state`
    (its sans-IO StreamState), `overflow` (its reading of an error object as a context
    overflow), `endpoint` (from the configured base URL) and `build_request`."""

    kind: ClassVar[str]
    default_capabilities: ClassVar[Capabilities]
    wire_state: ClassVar[Callable[[], WireState]]
    overflow: ClassVar[Callable[[Mapping[str, Any]], ContextOverflow | None]]

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        api_key: str | None = None,
        name: str | None = None,
        capabilities: Capabilities | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self._client = client
        self._endpoint = self.endpoint(base_url)
        self._api_key = api_key
        self._name = self.kind if name is None else name
        self.capabilities = self.default_capabilities if capabilities is None else capabilities
        self._timeouts = Timeouts() if timeouts is None else timeouts

    @property
    def name(self) -> str:
        return self._name

    @staticmethod
    @abc.abstractmethod
    def endpoint(base_url: str) -> str:
        """What the adapter's requests are sent to, from the configured base URL."""

    @abc.abstractmethod
    def build_request(self, request: ChatRequest) -> httpx.Request:
        """The adapter's HTTP request for one sample."""

    def http_error(self, error: HttpError) -> LlmError:
        """The error a non-2xx response raises: a `ContextOverflow` when the adapter's
        `overflow` recognises a 400's error object, else `error` itself."""
        body = _overflow.error_object(error.body) if error.status == 400 else None
        overflow = type(self).overflow(body) if body is not None else None
        return error if overflow is None else overflow

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        http_request = self.build_request(request)
        async with open_event_stream(
            self._client, http_request, timeouts=self._timeouts, on_http_error=self.http_error
        ) as sse:
            yield ProviderEvents(sse, type(self).wire_state())
