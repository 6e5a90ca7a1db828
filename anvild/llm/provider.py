"""The Provider protocol: how the agent asks a model for one streamed response.

    async with provider.stream(request) as events:
        async for event in events:
            ...

`stream` returns an async context manager that yields an async iterator of `StreamEvent`s. The
context manager owns the HTTP response (or whatever the provider holds): leaving the block closes
it, whether the iteration finished, failed or was cancelled. Deadlines and cleanup therefore live
in the context manager and the iterator's `__anext__`, never around a `yield` inside a cancel
scope (which trio forbids for generators). Errors are `LlmError`s, raised either when entering
the block (HTTP status, connect failures) or from the iteration (stream errors, deadlines).

Closing a stream does not prove that the provider stopped generating or billing for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from anvild.llm.stream import StreamEvent
from anvild.llm.types import ChatRequest


@runtime_checkable
class Provider(Protocol):
    @property
    def name(self) -> str:
        """A short label for logs and errors (the configured provider name)."""
        ...

    def stream(
        self, request: ChatRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[StreamEvent]]: ...


class WrappedProvider:
    """A provider in front of `inner` (retries, budgets, a limiter, the request log) that keeps
    its name; a subclass sets `inner` and defines `stream`."""

    inner: Provider

    @property
    def name(self) -> str:
        return self.inner.name
