"""`RequestLog`: the identity of each model request a session sends, for its usage record.

`provider(inner)` wraps the session's provider: each request it is handed (the `ChatRequest`
the agent loop built) is kept as the latest. When the loop reports that request's usage, the
`UsageReported` record (`usage_record`) carries its identity (`anvild.llm.identity`): the
request and head digests, and the head itself the first time this log sees that head, so the
system prompt and tool definitions are written once per distinct head, not per step, and the
time the response finished (`at`, by the log's clock, whole seconds). Requests are sequential
within a session; a request that failed reports no usage, and the next one replaces it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import structlog

from anvild.llm.identity import RequestHasher
from anvild.llm.provider import Provider, WrappedProvider
from anvild.llm.stream import StreamEvent, Usage
from anvild.llm.types import ChatRequest
from anvild.store import UsageReported

log = structlog.get_logger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


class RequestLog:
    def __init__(self, clock: Callable[[], dt.datetime] = _now) -> None:
        self._clock = clock
        self._hasher = RequestHasher()
        self._latest: ChatRequest | None = None
        self._written: set[str] = set()  # heads already in the records

    def provider(self, inner: Provider) -> Provider:
        """`inner`, with each request it is handed kept as the latest."""
        return _Logged(inner, self)

    def sent(self, request: ChatRequest) -> None:
        self._latest = request

    def usage_record(self, usage: Usage) -> UsageReported:
        """The record of the latest request's usage, with its identity when it is known."""
        request, self._latest = self._latest, None
        at = self._clock()
        if request is None:
            return UsageReported(usage, at=at)
        try:
            found = self._hasher.identify(request)
        except (TypeError, ValueError) as exc:  # never lose the usage over its identity
            log.warning("request.identity_failed", error=repr(exc))
            self._hasher = RequestHasher()
            return UsageReported(usage, at=at)
        body = None if found.head in self._written else found.head_body
        self._written.add(found.head)
        return UsageReported(usage, at=at, request=found.digest, head=found.head, head_body=body)


class _Logged(WrappedProvider):
    def __init__(self, inner: Provider, log: RequestLog) -> None:
        self.inner = inner
        self._log = log

    def stream(
        self, request: ChatRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[StreamEvent]]:
        self._log.sent(request)
        return self.inner.stream(request)


__all__ = ["RequestLog"]
