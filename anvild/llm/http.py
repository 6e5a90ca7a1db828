"""Thin trio/httpx glue shared by the provider adapters: status checks and SSE over HTTP.

    async with open_event_stream(client, request, timeouts=Timeouts()) as events:
        async for sse in events: ...

Deadlines are ours, not httpx's: `request` bounds the wait for response headers, `idle` the gap
between body chunks (a stalled body is a `TransportError` that says so). A `LeanTransport`
response is read through its body directly; any other through `aiter_bytes`, with the same
events, errors and deadlines. httpx errors become `LlmError`s here; a non-2xx status is an
`HttpError` unless `on_http_error` recognises something more precise (a context overflow).
"""

from __future__ import annotations

import collections
import email.utils
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import attrs
import httpx
import structlog
import trio

from anvild.llm.errors import HttpError, LlmError, TransportError
from anvild.llm.sse import SseDecoder, SseEvent
from anvild.llm.transport import LeanBody, lean_body

log = structlog.get_logger(__name__)

MAX_ERROR_BODY_BYTES: Final = 64 * 1024
# Reading the rest of an abandoned body (SseStream.aclose): how long, and how much, at most.
DRAIN_GRACE: Final = 0.25
DRAIN_BYTES: Final = 64 * 1024


@attrs.frozen
class Timeouts:
    request: float = 60.0
    idle: float = 120.0


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP-date (RFC 9110
    section 10.2.3). Unparsable or absent: None. Dates in the past: 0."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def retry_after_from(headers: httpx.Headers) -> float | None:
    """Retry-After, or OpenAI's millisecond variant when that is all there is."""
    if (delay := parse_retry_after(headers.get("retry-after"))) is not None:
        return delay
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            return None
    return None


async def check_status(response: httpx.Response) -> None:
    """Raise HttpError for a non-2xx response, with (a bounded prefix of) its body."""
    if 200 <= response.status_code < 300:
        return
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk[: MAX_ERROR_BODY_BYTES - len(body)]
            if len(body) >= MAX_ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        pass  # the status is the error; a body we could not read adds nothing
    raise HttpError(
        response.status_code,
        body.decode("utf-8", "replace"),
        retry_after_from(response.headers),
    )


def transport_error(exc: httpx.HTTPError, what: str) -> TransportError:
    """Convert an httpx failure; timeouts and failed connects may be retried."""
    retryable = isinstance(exc, httpx.TimeoutException | httpx.ConnectError | httpx.ReadError)
    return TransportError(f"{what}: {type(exc).__name__}: {exc}", retryable=retryable)


class SseStream:
    """Async iterator of SSE events from a streaming response, with an idle deadline.

    A response from `LeanTransport` (`anvild.llm.transport`) is read through its `LeanBody`
    directly: each read hands the decoder every payload byte the socket had (many events when
    the daemon is behind), and the idle deadline is the body's own, a cancel scope only while
    the socket is empty. Any other response (httpx's transport, a mock) is read with
    `aiter_bytes` under a `move_on_after(idle)` per chunk."""

    def __init__(self, response: httpx.Response, *, idle: float, decoder: SseDecoder) -> None:
        self._response = response
        self._body = lean_body(response)
        self._chunks = response.aiter_bytes()
        self._idle = idle
        self._decoder = decoder
        self._ready: collections.deque[SseEvent] = collections.deque()
        self._eof = False

    def __aiter__(self) -> SseStream:
        return self

    def decoded(self) -> list[SseEvent]:
        """The events decoded from the bytes read so far and not yet taken, taken now: what
        the next `__anext__` calls would return without reading."""
        ready = list(self._ready)
        self._ready.clear()
        return ready

    async def aclose(self) -> None:
        """Finalise the body iterator now. httpx's `aiter_bytes` is an async generator: one left
        unexhausted (an error mid-stream, a consumer that stops after its Finish, a cancelled
        turn) would otherwise be finalised by the garbage collector, with a ResourceWarning.

        Closing the outer generator does not close the ones it wraps (httpx's `aiter_raw` and
        stream `__aiter__`s, httpcore's body generators: encode/httpx#3777, unfixed in 0.28),
        so over a real connection they would still warn. A consumer that stops at its final
        event leaves only the end of the body unread (the chunked terminator), so first read
        to EOF, briefly and boundedly, which finishes every nested generator and lets the
        connection go back to the pool. Mid-stream (an error, a cancel) the drain gives up
        after DRAIN_GRACE seconds or DRAIN_BYTES bytes and the generators are closed as they
        are."""
        if not self._eof and self._body is not None:
            # The lean body is no generator; reading its end lets the connection be reused.
            drained = 0
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + DRAIN_GRACE
                try:
                    while drained <= DRAIN_BYTES:
                        data = await self._body.receive_some(DRAIN_GRACE)
                        if not data:
                            self._eof = True
                            break
                        drained += len(data)
                except httpx.HTTPError:
                    pass  # the body is being abandoned; its errors no longer matter
            return
        if not self._eof:
            drained = 0
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + DRAIN_GRACE
                try:
                    while drained <= DRAIN_BYTES:
                        drained += len(await anext(self._chunks))
                except StopAsyncIteration:
                    self._eof = True
                except httpx.HTTPError:
                    pass  # the body is being abandoned; its errors no longer matter
        if not self._eof and isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()

    async def __anext__(self) -> SseEvent:
        if self._body is not None:
            return await self._next_lean(self._body)
        while not self._ready:
            if self._eof:
                raise StopAsyncIteration
            chunk: bytes | None = None
            with trio.move_on_after(self._idle) as scope:
                try:
                    chunk = await anext(self._chunks)
                except StopAsyncIteration:
                    self._eof = True
                    self._decoder.finish()
                except httpx.HTTPError as exc:
                    raise transport_error(exc, "reading the provider's stream failed") from exc
            if scope.cancelled_caught:
                raise self._idle_error()
            if chunk:
                self._ready.extend(self._decoder.push(chunk))
        return self._ready.popleft()

    async def _next_lean(self, body: LeanBody) -> SseEvent:
        while not self._ready:
            if self._eof:
                raise StopAsyncIteration
            try:
                data = await body.receive_some(self._idle)
            except httpx.ReadTimeout:
                raise self._idle_error() from None
            except httpx.HTTPError as exc:
                raise transport_error(exc, "reading the provider's stream failed") from exc
            if data:
                self._ready.extend(self._decoder.push(data))
            else:
                self._eof = True
                self._decoder.finish()
        return self._ready.popleft()

    def _idle_error(self) -> TransportError:
        return TransportError(
            f"the provider sent nothing for {self._idle:g} s (idle deadline); the stream "
            "was closed, which does not prove the provider stopped generating",
            retryable=True,
        )


async def _send(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """`client.send`, once more on a fresh connection when a pooled keep-alive connection turns
    out to have been closed by the server: httpcore then reports "Server disconnected without
    sending a response" before any byte of a response, so the request was never answered (the
    race every HTTP client with a pool has; local servers such as llama-server close idle
    connections eagerly). Any other failure, and a second disconnect, is raised."""
    try:
        return await client.send(request, stream=True)
    except httpx.RemoteProtocolError as exc:
        if "without sending a response" not in str(exc):
            raise
        log.debug("stale keep-alive connection; resending once", host=request.url.host)
        return await client.send(request, stream=True)


@asynccontextmanager
async def open_event_stream(
    client: httpx.AsyncClient,
    request: httpx.Request,
    *,
    timeouts: Timeouts = Timeouts(),
    decoder: SseDecoder | None = None,
    on_http_error: Callable[[HttpError], LlmError] | None = None,
) -> AsyncIterator[SseStream]:
    """Send `request`, check its status, and yield its body as SSE events. A non-2xx status
    raises `on_http_error(HttpError)` when given (the HttpError itself when it returns that)."""
    try:
        with trio.fail_after(timeouts.request):
            response = await _send(client, request)
    except trio.TooSlowError:
        raise TransportError(
            f"no response from {request.url.host} within {timeouts.request:g} s",
            retryable=True,
        ) from None
    except httpx.HTTPError as exc:
        raise transport_error(exc, f"request to {request.url.host} failed") from exc
    try:
        try:
            await check_status(response)
        except HttpError as exc:
            error = exc if on_http_error is None else on_http_error(exc)
            if error is exc:
                raise
            raise error from exc
        events = SseStream(response, idle=timeouts.idle, decoder=decoder or SseDecoder())
        try:
            yield events
        finally:
            await events.aclose()
    finally:
        await response.aclose()
