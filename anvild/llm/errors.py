"""Errors of the llm layer. Every failure a provider call can end in is one of these:

    LlmError
     ├── HttpError          non-2xx status: status, body (bounded), retry_after seconds
     ├── TransportError     connect/read/write failures and deadlines (stalled bodies included)
     ├── ApiError           the provider reported an error in a 2xx body: kind, message
     ├── ContextOverflow    larger than the context window: requested and limit when known
     ├── DecodeError        bytes or events that break the protocol (bad SSE, bad sequencing)
     ├── UnexpectedEof      the stream ended before its Finish
     └── ConfigError        the request cannot be made as configured (missing key, bad alias)

Lower-layer exceptions are converted at the boundary (`raise ... from exc`). `is_retryable`:
408, 429, 5xx (529 included), transport timeouts, failed connects, overload kinds. A
ContextOverflow is never retryable: only a smaller request can succeed.
"""

from __future__ import annotations

from typing import Final

RETRYABLE_API_KINDS: Final = frozenset(
    {
        "overloaded_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "server_error",
        "api_error",
        "RESOURCE_EXHAUSTED",
        "UNAVAILABLE",
    }
)


class LlmError(Exception):
    """Root of the llm layer's errors."""

    @property
    def is_retryable(self) -> bool:
        return False


class HttpError(LlmError):
    def __init__(self, status: int, body: str, retry_after: float | None = None):
        self.status = status
        self.body = body
        self.retry_after = retry_after
        detail = body.strip()
        if len(detail) > 500:
            detail = detail[:500] + "…"
        super().__init__(f"HTTP {status}: {detail}" if detail else f"HTTP {status}")

    @property
    def is_retryable(self) -> bool:
        return self.status in (408, 429) or self.status >= 500


class TransportError(LlmError):
    """The connection failed or a deadline passed. `retryable` is set by whoever converts the
    lower-layer error: timeouts and failed connects are retryable, others are not."""

    def __init__(self, message: str, *, retryable: bool = False):
        self.retryable = retryable
        super().__init__(message)

    @property
    def is_retryable(self) -> bool:
        return self.retryable


class ApiError(LlmError):
    def __init__(self, kind: str, message: str):
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")

    @property
    def is_retryable(self) -> bool:
        return self.kind in RETRYABLE_API_KINDS


class ContextOverflow(LlmError):
    """The provider refused the request because it does not fit the model's context window.

    `message` is the provider's own text; `requested` and `limit` are the request's size and the
    window in tokens, each None when the provider did not say it. Adapters map every provider's
    shape of this refusal (an HTTP 400 body, or an error event inside a 2xx stream) to this one
    type, so the caller can shrink the conversation instead of failing the turn."""

    def __init__(self, message: str, *, requested: int | None = None, limit: int | None = None):
        self.message = message
        self.requested = requested
        self.limit = limit
        counts = [
            text
            for value, text in (
                (requested, f"{requested} tokens requested"),
                (limit, f"{limit} allowed"),
            )
            if value is not None
        ]
        detail = f" ({', '.join(counts)})" if counts else ""
        super().__init__(f"the request did not fit the model's context window{detail}: {message}")


class DecodeError(LlmError):
    """Malformed input from the provider: bytes that are not a valid event stream, or events in
    an order the protocol forbids."""


class UnexpectedEof(LlmError):
    def __init__(self, message: str = "the stream ended before the provider finished its answer"):
        super().__init__(message)


class ConfigError(LlmError):
    """The request cannot be made as configured; the message says what to change."""
