"""Retry: a Provider that wraps another and retries the failures worth retrying.

    provider = Retry(AnthropicProvider(...), RetryPolicy(max_attempts=5, deadline=90))

One attempt = opening the inner stream and waiting for its first event. Only an `LlmError` with
`is_retryable` (408, 429, 5xx, timeouts, failed connects, overload kinds) is retried; a bad key
is attempted exactly once. Retrying stops at the first event: a half-consumed stream is never
replayed. The delay is Retry-After when given, else equal-jitter exponential backoff; a total
deadline bounds it, and the last error is raised with a note saying why retrying stopped (trio's
clock, so tests use `autojump_clock`). Each retry is logged (`provider.retry`) and told to the
opening task's `retry_listener` (a context variable); a listener that raises is only logged.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import NoReturn

import attrs
import structlog
import trio

from anvild.llm.errors import ApiError, HttpError, LlmError
from anvild.llm.provider import Provider, WrappedProvider
from anvild.llm.stream import StreamEvent
from anvild.llm.types import ChatRequest

log = structlog.get_logger(__name__)


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class RetryPolicy:
    """How hard to try. Times are seconds."""

    max_attempts: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    base: float = attrs.field(default=1.0, validator=_positive)
    cap: float = attrs.field(default=30.0, validator=_positive)
    deadline: float = attrs.field(default=120.0, validator=_positive)

    def backoff(self, attempt: int, jitter: float) -> float:
        """The wait after failed attempt `attempt` (1-based); `jitter` is in [0, 1)."""
        step = min(self.cap, self.base * 2.0 ** (attempt - 1))
        return step * (0.5 + jitter / 2)


@attrs.frozen
class RetryNotice:
    """A retry starts: attempt `attempt` (2 is the first retry) of at most `max_attempts` will
    be made after `delay` seconds, because of `reason` (the failed attempt's error in one line:
    an HTTP error's status and its JSON body's message)."""

    provider: str
    attempt: int
    max_attempts: int
    delay: float
    reason: str


RetryListener = Callable[[RetryNotice], None]

_listener: ContextVar[RetryListener | None] = ContextVar("anvild_retry_listener", default=None)


@contextmanager
def retry_listener(listener: RetryListener) -> Iterator[None]:
    """Within the block, every retry of a stream this task opens is told to `listener` (called
    before the wait, on the task's thread; it must not block)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def _notify(notice: RetryNotice) -> None:
    listener = _listener.get()
    if listener is None:
        return
    try:
        listener(notice)
    except Exception:
        log.exception("provider.retry_listener_failed", provider=notice.provider)


def _reason(error: LlmError) -> str:
    """A retry's reason in one short line: an HTTP error's status and the message of its JSON
    body (`HTTP 529: Overloaded`) rather than the whole body."""
    if isinstance(error, HttpError):
        try:
            body = json.loads(error.body)
        except ValueError:
            body = None
        inner = body.get("error", body) if isinstance(body, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message.strip():
            return f"HTTP {error.status}: {message.strip().splitlines()[0][:200]}"
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _describe(error: LlmError) -> dict[str, object]:
    """What a log line says about an error: its HTTP status or API kind, and its text."""
    if isinstance(error, HttpError):
        return {"status": error.status, "error": str(error)}
    if isinstance(error, ApiError):
        return {"status": error.kind, "error": str(error)}
    return {"status": type(error).__name__, "error": str(error)}


class _Resumed:
    """The inner stream with its already-received first event put back in front."""

    def __init__(self, first: StreamEvent | None, rest: AsyncIterator[StreamEvent]) -> None:
        self._first = first
        self._rest = rest

    def __aiter__(self) -> _Resumed:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await anext(self._rest)


class Retry(WrappedProvider):
    """A Provider that retries the retryable failures of `inner` before its first event."""

    def __init__(
        self,
        inner: Provider,
        policy: RetryPolicy | None = None,
        *,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self._jitter = jitter

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        stack, events = await self._open(request)
        async with stack:
            yield events

    async def _open(self, request: ChatRequest) -> tuple[AsyncExitStack, _Resumed]:
        policy = self.policy
        deadline = trio.current_time() + policy.deadline
        attempt = 0
        while True:
            attempt += 1
            stack = AsyncExitStack()
            try:
                events = await stack.enter_async_context(self.inner.stream(request))
                try:
                    first: StreamEvent | None = await anext(events)
                except StopAsyncIteration:
                    first = None  # an empty stream: the builder reports it as UnexpectedEof
            except LlmError as error:
                await stack.aclose()
                delay = self._next_delay(error, attempt, deadline)
                log.warning(
                    "provider.retry",
                    provider=self.name,
                    attempt=attempt,
                    next_attempt=attempt + 1,
                    delay=round(delay, 3),
                    **_describe(error),
                )
                reason = _reason(error)
                _notify(RetryNotice(self.name, attempt + 1, policy.max_attempts, delay, reason))
                await trio.sleep(delay)
                continue
            except BaseException:
                await stack.aclose()
                raise
            return stack, _Resumed(first, events)

    def _next_delay(self, error: LlmError, attempt: int, deadline: float) -> float:
        """The wait before the next attempt, or raise `error` (annotated) if there is none."""
        policy = self.policy
        if not error.is_retryable:
            raise error
        if attempt >= policy.max_attempts:
            self._give_up(error, f"gave up after {attempt} attempts (the most allowed)")
        retry_after = error.retry_after if isinstance(error, HttpError) else None
        if retry_after is not None:
            delay, why = retry_after, "the server's Retry-After"
        else:
            delay, why = policy.backoff(attempt, self._jitter()), "the next backoff"
        left = deadline - trio.current_time()
        if delay > left:
            self._give_up(
                error,
                f"gave up after {attempt} attempt{'s' if attempt > 1 else ''}: {why} of "
                f"{delay:g} s would pass the {policy.deadline:g} s retry deadline "
                f"({max(left, 0.0):.3g} s left)",
            )
        return delay

    def _give_up(self, error: LlmError, why: str) -> NoReturn:
        log.warning("provider.retry_stopped", provider=self.name, reason=why, **_describe(error))
        error.add_note(f"{self.name}: {why}")
        raise error
